package cri

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writePlugin writes an exec plugin into dir that counts its runs in
// dir/runs, keeps its request in dir/request and answers response.
func writePlugin(t *testing.T, dir, name, response string) {
	t.Helper()
	script := fmt.Sprintf("#!/bin/sh\necho \"run $* $REGION\" >> %q\ncat > %q\ncat <<'EOF'\n%s\nEOF\n", filepath.Join(dir, "runs"), filepath.Join(dir, "request"), response)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeProviderConfig(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func runs(t *testing.T, dir string) int {
	data, _ := os.ReadFile(filepath.Join(dir, "runs"))
	return strings.Count(string(data), "run")
}

// A plugin whose matchImages match the image gets the kubelet's request
// and its answer's credentials are used and cached as it says (Registry
// for 1h: one run for two images of the registry); a plugin that matches
// no image is not run.
func TestCredentialProviderLookup(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, dir, "reg-creds", `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"1h","auth":{"*.registry.example":{"username":"u","password":"pw"}}}`)
	other := t.TempDir()
	writePlugin(t, other, "other", `{}`)
	cfg := writeProviderConfig(t, dir, `providers:
- name: reg-creds
  matchImages: ["*.registry.example", "registry.example:5000/team"]
  defaultCacheDuration: 10m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: ["get-credentials"]
  env:
  - name: REGION
    value: test
`)
	cp, err := LoadCredentialProviders(cfg, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	a := cp.lookup(ctx, "eu.registry.example/app:v1")
	if len(a) != 1 || a[0].Username != "u" || a[0].Password != "pw" {
		t.Fatalf("credentials %+v", a)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "runs")); strings.TrimSpace(string(data)) != "run get-credentials test" {
		t.Errorf("the plugin ran as %q, want its args and env", data)
	}
	req, _ := os.ReadFile(filepath.Join(dir, "request"))
	if want := `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"eu.registry.example/app"}`; string(req) != want {
		t.Errorf("request %s, want %s", req, want)
	}
	if a := cp.lookup(ctx, "eu.registry.example/other:v2"); len(a) != 1 || runs(t, dir) != 1 {
		t.Errorf("a second image of the registry: %+v after %d runs, want the cached answer", a, runs(t, dir))
	}
	if a := cp.lookup(ctx, "quay.io/app:v1"); len(a) != 0 || runs(t, dir) != 1 {
		t.Errorf("an image no matchImages matches: %+v, %d runs", a, runs(t, dir))
	}
	// matched by the plugin, but its answer's key does not match.
	if a := cp.lookup(ctx, "registry.example:5000/team/app"); len(a) != 0 || runs(t, dir) != 2 {
		t.Errorf("registry.example:5000/team/app: %+v, %d runs", a, runs(t, dir))
	}
}

// What the runtime cannot honour or find is refused when loaded; a plugin
// that answers badly gives no credentials.
func TestCredentialProviderConfigRefused(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, dir, "p", `not json`)
	base := "- name: p\n  matchImages: [\"r.example\"]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
	for what, body := range map[string]string{
		"tokenAttributes": "providers:\n" + base + "  tokenAttributes:\n    serviceAccountTokenAudience: x\n    cacheType: Token\n    requireServiceAccount: true\n",
		"no binary":       strings.Replace("providers:\n"+base, "name: p", "name: missing", 1),
		"old apiVersion":  strings.Replace("providers:\n"+base, "kubelet.k8s.io/v1\n", "kubelet.k8s.io/v1beta1\n", 1),
		"no matchImages":  strings.Replace("providers:\n"+base, `matchImages: ["r.example"]`, "matchImages: []", 1),
		"a path as name":  strings.Replace("providers:\n"+base, "name: p", "name: ../p", 1),
		"unknown field":   "providers:\n" + base + "  bogus: 1\n",
	} {
		if _, err := LoadCredentialProviders(writeProviderConfig(t, dir, body), dir, nil); err == nil {
			t.Errorf("%s: loaded", what)
		}
	}
	cp, err := LoadCredentialProviders(writeProviderConfig(t, dir, "providers:\n"+base), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := cp.lookup(t.Context(), "r.example/app"); len(a) != 0 {
		t.Errorf("a bad answer gave %+v", a)
	}
}
