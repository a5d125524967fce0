#!/usr/bin/env bash
# Builds what `make conformance` runs beyond the test control plane into the
# given bin directory, from the Go module proxy, in the build-only module
# beside this script (k8s.io/kubernetes at the version its go.mod pins):
#   e2e.test  test/e2e compiled (`go test -c`): Kubernetes' e2e suite (~200 MB)
#   e2e_node.test  test/e2e_node compiled: the Node Conformance Test (make node-conformance)
#   agnhost   test/images/agnhost: the agnhost test image's binary
#   nnp       test/images/nonewprivs: the nonewprivs test image's binary
#   ginkgo    the Ginkgo CLI at the version e2e.test links: it runs e2e.test's
#             specs in parallel processes (make conformance's --procs)
#   agnhost-tls/  the certificate and key the agnhost image carries
# all static (CGO_ENABLED=0). A binary built from the pinned version (its
# Go build information says so) is not built again.
set -euo pipefail
bin=${1:?usage: build.sh BIN_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$bin"
bin=$(cd "$bin" && pwd) # the builds run in the module's directory
kube_version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/go.mod")
minor=${kube_version#v1.}; minor=${minor%%.*}

# The build-only module stands outside the workspace.
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0

# shellcheck source=hack/testenv/progress.sh
source "$here/../testenv/progress.sh"
PROGRESS_PREFIX=conformance

ldflags="-s -w \
	-X k8s.io/component-base/version.gitVersion=$kube_version \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$minor \
	-X k8s.io/component-base/version.gitTreeState=clean"

ginkgo_version=$(cd "$here" && go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)

# pinned NAME [MODULE VERSION]: the binary is there and its Go build
# information names MODULE at VERSION (k8s.io/kubernetes at the pinned
# version by default; read whole first: grep -q closing the pipe early
# would fail the check under pipefail).
pinned() {
	[[ -x "$bin/$1" ]] || return 1
	local info mod=${2:-k8s.io/kubernetes} version=${3:-$kube_version}
	info=$(go version -m "$bin/$1" 2>/dev/null) || return 1
	[[ "$info" == *$'\t'"$mod"$'\t'"$version"* ]]
}

go_test_c() { # name package
	cd "$here" && go test -c -vet=off -trimpath -ldflags "$ldflags" -o "$bin/$1" "$2"
}

go_build() { # name package
	cd "$here" && go build -trimpath -ldflags "$ldflags" -o "$bin/$1" "$2"
}

build() { # how name package hint
	local how=$1 name=$2 pkg=$3
	if pinned "$name"; then
		echo "conformance: $name $kube_version already built"
		return
	fi
	echo "conformance: building $name $kube_version ($4) ..."
	# A failed or interrupted build leaves nothing half-written behind.
	rm -f "$bin/$name"
	PROGRESS_HINT=$4 built "$name" "$how" "$name" "$pkg"
}

build go_test_c e2e.test k8s.io/kubernetes/test/e2e "about 6 minutes on 2 cores the first time"
build go_test_c e2e_node.test k8s.io/kubernetes/test/e2e_node "about 10 minutes on 2 cores the first time"
build go_build agnhost k8s.io/kubernetes/test/images/agnhost "a minute or two the first time"
build go_build nnp k8s.io/kubernetes/test/images/nonewprivs "seconds"
if pinned ginkgo github.com/onsi/ginkgo/v2 "$ginkgo_version"; then
	echo "conformance: ginkgo $ginkgo_version already built"
else
	echo "conformance: building ginkgo $ginkgo_version (seconds) ..."
	rm -f "$bin/ginkgo"
	PROGRESS_HINT=seconds built ginkgo go_build ginkgo github.com/onsi/ginkgo/v2/ginkgo
fi

# The TLS certificate and key the agnhost image carries (its porter/ files).
if [[ ! -f "$bin/agnhost-tls/localhost.key" ]]; then
	src=$(cd "$here" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/porter
	mkdir -p "$bin/agnhost-tls"
	cp "$src/localhost.crt" "$src/localhost.key" "$bin/agnhost-tls/"
	chmod 644 "$bin/agnhost-tls/"*
fi
