package cri

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The pull records: an image pulled with a credential runs without a pull
// only for that credential; one pulled anonymously or never pulled (there
// before) for every pod; a pull cut short (its intent left) makes every
// pod pull. The records outlive the runtime that wrote them.
func TestPullRecords(t *testing.T) {
	dir := t.TempDir()
	alice := &runtimeapi.AuthConfig{ServerAddress: "reg", Username: "alice", Password: "a"}
	bob := &runtimeapi.AuthConfig{ServerAddress: "reg", Username: "alice", Password: "b"}
	p := &pullRecords{dir: dir}
	must := func(p *pullRecords, image, ref string, auths ...*runtimeapi.AuthConfig) bool {
		t.Helper()
		m, err := p.mustPull(image, ref, func() []*runtimeapi.AuthConfig { return auths })
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if must(p, "reg/app:v1", "sha256:1") {
		t.Error("a preloaded image must be pulled")
	}
	if err := p.intend("reg/app:v1"); err != nil {
		t.Fatal(err)
	}
	if !must(p, "reg/app:v1", "sha256:1", alice) {
		t.Error("an image whose pull was cut short need not be pulled")
	}
	if err := p.done("reg/app:v1", "sha256:1", alice); err != nil {
		t.Fatal(err)
	}
	p = &pullRecords{dir: dir} // a restarted runtime
	if must(p, "reg/app:v1", "sha256:1", bob, alice) {
		t.Error("the credential that pulled the image must pull again")
	}
	if !must(p, "reg/app:v1", "sha256:1") || !must(p, "reg/app:v1", "sha256:1", bob) {
		t.Error("a pod without the credential that pulled the image runs it without a pull")
	}
	if err := p.intend("reg/app:v1"); err != nil {
		t.Fatal(err)
	}
	if err := p.done("reg/app:v1", "", bob); err != nil {
		t.Fatal(err)
	}
	if !must(p, "reg/app:v1", "sha256:1", bob) || must(p, "reg/app:v1", "sha256:1", alice) {
		t.Error("a failed pull changed the records")
	}
	if err := p.done("reg/app:v1", "sha256:1", nil); err != nil {
		t.Fatal(err)
	}
	if must(p, "reg/app:v1", "sha256:1") {
		t.Error("an image pulled anonymously must be pulled again")
	}
	var none *pullRecords
	if must(none, "reg/app:v1", "sha256:1") {
		t.Error("without records every present image runs")
	}
}
