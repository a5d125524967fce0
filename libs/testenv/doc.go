// Package testenv starts real dependencies for tests and for `make run`: a
// kube-apiserver with its etcd (binaries built by `make testenv` into bin/),
// and an embedded NATS server with JetStream. Under `go test -short` (the
// unit tier, make test-unit) the tests that need more than Go skip
// (SkipShort; ControlPlaneForTest does it itself); without -short a missing
// dependency fails them.
package testenv
