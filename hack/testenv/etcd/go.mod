module github.com/splitlet/splitlet/hack/testenv/etcd

// Build-only module: pins the etcd server that the test control plane runs.

go 1.26.0

require go.etcd.io/etcd/server/v3 v3.5.35
