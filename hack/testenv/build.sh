#!/usr/bin/env bash
# Builds the test control plane into the given bin directory from the Go
# module proxy, using the build-only modules beside this script:
#   kube/  k8s.io/kubernetes v1.36.3, every staging module pinned to v0.36.3
#   etcd/  go.etcd.io/etcd/server/v3 v3.5.x
#   registry/  github.com/distribution/distribution/v3, the CNCF registry
#          the image pull tests push to (htpasswd auth, on 127.0.0.1)
#   coredns/  github.com/coredns/coredns with the plugins a test cluster's
#          DNS needs (coredns/main.go), beside kube-proxy for Services
#   metrics-server/  sigs.k8s.io/metrics-server, the resource metrics API
#          (kubectl top) the node metrics test runs against a Splitlet node
# A binary already at the pinned version is not built again.
set -euo pipefail
bin=${1:?usage: build.sh BIN_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$bin"
bin=$(cd "$bin" && pwd) # the builds run in the modules' directories
kube_version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/kube/go.mod")
etcd_version=$(awk '$1=="require" && $2=="go.etcd.io/etcd/server/v3" {print $3}' "$here/etcd/go.mod")
registry_version=$(awk '$1=="require" && $2=="github.com/distribution/distribution/v3" {print $3}' "$here/registry/go.mod")
coredns_version=$(awk '$1=="require" && $2=="github.com/coredns/coredns" {print $3}' "$here/coredns/go.mod")
minor=${kube_version#v1.}; minor=${minor%%.*}

# The build-only modules stand outside the workspace.
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0

# progress lines while a build runs (built NAME CMD...).
# shellcheck source=hack/testenv/progress.sh
source "$here/progress.sh"

go_build_kube() { # name
	cd "$here/kube" && go build -trimpath -ldflags "-s -w \
		-X k8s.io/component-base/version.gitVersion=$kube_version \
		-X k8s.io/component-base/version.gitMajor=1 \
		-X k8s.io/component-base/version.gitMinor=$minor \
		-X k8s.io/component-base/version.gitTreeState=clean" \
		-o "$bin/$1" "k8s.io/kubernetes/cmd/$1"
}

go_build_etcd() {
	cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
}

go_build_registry() {
	cd "$here/registry" && go build -trimpath -ldflags "-s -w \
		-X github.com/distribution/distribution/v3/version.version=$registry_version" \
		-o "$bin/registry" github.com/distribution/distribution/v3/cmd/registry
}

go_build_coredns() {
	cd "$here/coredns" && go build -trimpath -ldflags "-s -w" -o "$bin/coredns" .
}

build_coredns() {
	if [[ -x "$bin/coredns" ]] && [[ "$("$bin/coredns" -version 2>/dev/null)" == "CoreDNS-${coredns_version#v}"$'\n'* ]]; then
		echo "testenv: coredns $coredns_version already built"
		return
	fi
	echo "testenv: building coredns $coredns_version ..."
	built coredns go_build_coredns
}

build_registry() {
	if [[ -x "$bin/registry" ]] && [[ "$("$bin/registry" --version 2>/dev/null)" == *" $registry_version" ]]; then
		echo "testenv: registry $registry_version already built"
		return
	fi
	echo "testenv: building registry $registry_version ..."
	built registry go_build_registry
}

build_kube() { # name
	local name=$1
	# (the version is read whole first: grep -q closing the pipe early would
	# fail the check under pipefail)
	if [[ -x "$bin/$name" ]] && [[ "$("$bin/$name" --version 2>/dev/null)" == "Kubernetes $kube_version" ]]; then
		echo "testenv: $name $kube_version already built"
		return
	fi
	echo "testenv: building $name $kube_version (a few minutes the first time) ..."
	built "$name" go_build_kube "$name"
}

build_etcd() {
	if [[ -x "$bin/etcd" ]] && [[ "$("$bin/etcd" --version 2>/dev/null)" == *"etcd Version: ${etcd_version#v}"$'\n'* ]]; then
		echo "testenv: etcd $etcd_version already built"
		return
	fi
	echo "testenv: building etcd $etcd_version ..."
	built etcd go_build_etcd
}

go_build_metrics_server() {
	cd "$here/metrics-server" && go build -trimpath -ldflags "-s -w \
		-X k8s.io/client-go/pkg/version.gitVersion=$metrics_server_version" \
		-o "$bin/metrics-server" sigs.k8s.io/metrics-server/cmd/metrics-server
}

build_metrics_server() {
	local v
	v=$(awk '$1=="require" && $2=="sigs.k8s.io/metrics-server" {print $3}' "$here/metrics-server/go.mod")
	if [[ -x "$bin/metrics-server" ]] && [[ "$("$bin/metrics-server" --version 2>/dev/null)" == "$v" ]]; then
		echo "testenv: metrics-server $v already built"
		return
	fi
	echo "testenv: building metrics-server $v ..."
	metrics_server_version=$v
	built metrics-server go_build_metrics_server
}

build_etcd
build_kube kube-apiserver
# kube-controller-manager: its CSR signer and approver let a node join with a
# bootstrap token (make run, the join test).
build_kube kube-controller-manager
# What only the tests use (TESTENV_RUN_ONLY=1, for make run, skips it): the
# registry the pull tests push to; kube-proxy and CoreDNS, Services by
# ClusterIP and by name around a node (libs/testenv.StartClusterNetwork);
# metrics-server, the resource metrics API; the kubelet (static), the peer
# whose figures the resource metrics test compares a Splitlet node's with.
if [[ -z "${TESTENV_RUN_ONLY:-}" ]]; then
	build_registry
	build_kube kube-proxy
	build_coredns
	build_metrics_server
	build_kube kubelet
fi
# kube-scheduler builds the same way when a test needs it:
# TESTENV_EXTRA=kube-scheduler; so does the kubelet where the test-only
# binaries are not built (make conformance NODE=kubelet: TESTENV_EXTRA=kubelet).
for extra in ${TESTENV_EXTRA:-}; do
	build_kube "$extra"
done
