package testenv

import (
	"flag"
	"testing"
)

// The unit tier (`go test -short`, make test-unit) runs what needs Go alone.
// Under -short a test that needs a control plane (etcd, kube-apiserver), a
// nats-server or stage binary, containerd, a Docker engine or root is
// skipped; without -short it runs, and a missing dependency fails it.

// SkipShort skips t under -short; what names what it needs beyond Go
// ("etcd and kube-apiserver", "containerd", "root").
func SkipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped under -short", what)
	}
}

// Short reports whether the test binary runs with -short. It parses the
// command line first, so a TestMain may call it before m.Run.
func Short() bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	return testing.Short()
}
