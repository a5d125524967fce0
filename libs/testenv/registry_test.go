package testenv

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The registry takes only its account: an image pushed to it is there for
// that account and refused to an anonymous client and a wrong password.
func TestRegistryAuth(t *testing.T) {
	SkipShort(t, "the registry binary (make testenv)")
	r, err := StartRegistry(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	if _, err := r.PushBusybox(t.Context(), "private/busybox", "v1"); err != nil {
		t.Fatal(err)
	}
	get := func(user, pass string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, "http://"+r.Host+"/v2/private/busybox/manifests/v1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(r.User, r.Password); code != http.StatusOK {
		t.Errorf("manifest with the account: %d, want 200", code)
	}
	if code := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("manifest anonymously: %d, want 401", code)
	}
	if code := get(r.User, r.Password+"x"); code != http.StatusUnauthorized {
		t.Errorf("manifest with a wrong password: %d, want 401", code)
	}
}

// PushMirror puts the images under upstream at the same repository and tag
// here, and the hosts.toml WriteMirrorConfig writes sends containerd there
// with a header the registry takes (an anonymous client gets 401).
func TestRegistryMirror(t *testing.T) {
	SkipShort(t, "the registry binary (make testenv)")
	r, err := StartRegistry(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	files := append(baseFiles(), ImageFile{Path: "data.json", Mode: 0o644, Data: []byte("{}")})
	images := []E2EImage{{Kind: "kitten", Config: kittenConfig, Files: files,
		Names: []string{"registry.k8s.io/e2e-test-images/kitten:1.8", "other.example/kitten:1.8"}}}
	pushed, err := r.PushMirror(t.Context(), "registry.k8s.io", images)
	if err != nil || len(pushed) != 1 || pushed[0] != "registry.k8s.io/e2e-test-images/kitten:1.8" {
		t.Fatalf("pushed %v: %v", pushed, err)
	}
	dir := t.TempDir()
	if err := r.WriteMirrorConfig(dir, "registry.k8s.io"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "registry.k8s.io", "hosts.toml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("hosts.toml mode %v, want 0600 (it holds the password)", fi.Mode())
	}
	m := regexp.MustCompile(`(?m)^server = "https://registry.k8s.io"\n\n\[host."(http://[^"]+)"\]\n  capabilities = \["pull", "resolve"\]\n  \[host."[^"]+".header\]\n    Authorization = "([^"]+)"\n$`).FindStringSubmatch(string(data))
	if m == nil || m[1] != "http://"+r.Host {
		t.Fatalf("hosts.toml:\n%s", data)
	}
	get := func(auth string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, m[1]+"/v2/e2e-test-images/kitten/manifests/1.8", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", ociManifestType)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(m[2]); code != http.StatusOK {
		t.Errorf("the mirrored manifest with the hosts.toml header: %d, want 200", code)
	}
	if code := get(""); code != http.StatusUnauthorized {
		t.Errorf("the mirrored manifest anonymously: %d, want 401", code)
	}
}
