// Package testenv starts real dependencies for tests and for `make run`: a
// kube-apiserver with its etcd (binaries built by `make testenv` into bin/),
// and an embedded NATS server with JetStream.
package testenv
