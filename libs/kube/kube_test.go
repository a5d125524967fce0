package kube

import (
	"os"
	"path/filepath"
	"testing"
)

const kubeconfigYAML = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`

func TestRESTConfigContentType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfigYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, content, accept string }{
		{"application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf,application/json"},
		{"application/json", "application/json", ""},
		{"", "", ""},
	} {
		cfg, err := RESTConfig(path, 5, 10, "ua", tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ContentType != tc.content || cfg.AcceptContentTypes != tc.accept {
			t.Errorf("%q: content %q accept %q, want %q and %q", tc.in, cfg.ContentType, cfg.AcceptContentTypes, tc.content, tc.accept)
		}
		if cfg.QPS != 5 || cfg.Burst != 10 || cfg.UserAgent != "ua" || cfg.Host != "https://127.0.0.1:6443" {
			t.Errorf("%q: config %+v", tc.in, cfg)
		}
	}
}
