#!/usr/bin/env bash
# make images: FROM scratch images of host-built static binaries. Nothing is
# pulled, so no registry is needed. Expects in BIN_DIR what `make build`,
# `make testenv` and `make nats-server` put there; builds the control plane
# launcher (tools/controlplane) and, when its directory exists, the example
# TCP prober itself; the JavaScript prober (examples/jsprober) when its
# node_modules are installed (make jsprober-deps).
#
#   splitlet/<service>:TAG   nodehb podconfig prober statussync: the binary alone
#   splitlet/podworkers:TAG  + a static busybox (sh, sleep, httpd, ...) for
#   splitlet/splitlet:TAG      process-runtime pods
#   splitlet/nats:TAG        nats-server, + controlplane for its health check
#   splitlet/controlplane:TAG etcd, kube-apiserver, kube-controller-manager,
#                            metrics-server, CoreDNS, kube-proxy with this
#                            host's iptables (its libraries, as ldd lists
#                            them), controlplane (launcher and checks)
#   splitlet/tcpprober:TAG   examples/tcpprober (when present)
#   splitlet/jsprober:TAG    examples/jsprober: this host's node, the shared
#                            libraries ldd lists for it, the prober's JS and
#                            its node_modules
#
# `images.sh BIN_DIR jaeger` (make images-tracing) builds only
#   splitlet/jaeger:TAG      bin/jaeger (make jaeger), + controlplane for its
#                            health check, + the jaeger-ui assets of the
#                            directory JAEGER_UI_ASSETS names, when set
# which make images leaves out: building Jaeger takes minutes.
set -euo pipefail
bin=${1:?usage: images.sh BIN_DIR [jaeger]}
only=${2:-}
bin=$(cd "$bin" && pwd)
tag=${IMAGE_TAG:-dev}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if ! docker info >/dev/null 2>&1; then
	echo "images: no Docker engine answers; start dockerd first" >&2
	exit 1
fi
if [[ -n "$only" && "$only" != jaeger ]]; then
	echo "images: unknown image set $only (only jaeger)" >&2
	exit 2
fi
busybox=${BUSYBOX:-$(command -v busybox || true)}
# A static busybox: ldd says "not a dynamic executable" and fails.
if [[ -z "$only" ]] && { [[ -z "$busybox" ]] || ldd "$busybox" >/dev/null 2>&1; }; then
	echo "images: a static busybox is needed (Debian: apt-get install busybox-static)" >&2
	exit 1
fi
needs="etcd kube-apiserver kube-controller-manager metrics-server coredns kube-proxy nats-server splitlet nodehb podconfig podworkers prober statussync"
[[ "$only" == jaeger ]] && needs=jaeger
for need in $needs; do
	[[ -x "$bin/$need" ]] || { echo "images: $bin/$need missing (make build testenv nats-server, or make jaeger)" >&2; exit 1; }
done

ldflags="-s -w"
echo "images: building controlplane"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/controlplane" ./tools/controlplane
have_tcpprober=false
if [[ -z "$only" && -d examples/tcpprober/cmd/tcpprober ]]; then
	echo "images: building tcpprober"
	CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/tcpprober" ./examples/tcpprober/cmd/tcpprober
	have_tcpprober=true
fi

work="$bin/.images"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

# image NAME ENTRYPOINT WITH_BUSYBOX FILE...: splitlet/NAME:TAG from the files.
image() {
	local name=$1 entry=$2 with_busybox=$3
	shift 3
	local ctx="$work/$name"
	mkdir -p "$ctx/rootfs/tmp" "$ctx/rootfs/data"
	chmod 1777 "$ctx/rootfs/tmp"
	if [[ -n "${extra_rootfs:-}" ]]; then
		cp -a "$extra_rootfs/." "$ctx/rootfs/"
	fi
	for f in "$@"; do
		ln -f "$bin/$f" "$ctx/rootfs/$f" 2>/dev/null || cp "$bin/$f" "$ctx/rootfs/$f"
	done
	if [[ "$with_busybox" == yes ]]; then
		mkdir -p "$ctx/rootfs/bin"
		cp "$busybox" "$ctx/rootfs/bin/busybox"
		local applet
		for applet in $("$busybox" --list); do
			[[ "$applet" == busybox ]] || ln -s busybox "$ctx/rootfs/bin/$applet"
		done
	fi
	cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
ENTRYPOINT ["/$entry"]
DOCKERFILE
	echo "images: splitlet/$name:$tag"
	# The legacy builder's deprecation banner goes unless the build fails.
	if ! DOCKER_BUILDKIT=0 docker build -q -t "splitlet/$name:$tag" "$ctx" >"$work/$name.log" 2>&1; then
		cat "$work/$name.log" >&2
		exit 1
	fi
	rm -rf "$ctx"
}

if [[ "$only" == jaeger ]]; then
	ctx="$work/jaeger"
	mkdir -p "$ctx/rootfs/tmp"
	chmod 1777 "$ctx/rootfs/tmp"
	cp "$bin/jaeger" "$bin/controlplane" "$ctx/rootfs/"
	ui_env=
	if [[ -n "${JAEGER_UI_ASSETS:-}" ]]; then
		[[ -f "$JAEGER_UI_ASSETS/index.html" ]] || { echo "images: JAEGER_UI_ASSETS=$JAEGER_UI_ASSETS has no index.html" >&2; exit 1; }
		cp -r "$JAEGER_UI_ASSETS" "$ctx/rootfs/jaeger-ui"
		ui_env="ENV JAEGER_UI_ASSETS=/jaeger-ui"
		echo "images: jaeger with the UI assets of $JAEGER_UI_ASSETS"
	else
		echo "images: jaeger with its placeholder UI (JAEGER_UI_ASSETS unset; the API works)"
	fi
	cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
$ui_env
ENTRYPOINT ["/jaeger"]
DOCKERFILE
	echo "images: splitlet/jaeger:$tag"
	if ! DOCKER_BUILDKIT=0 docker build -q -t "splitlet/jaeger:$tag" "$ctx" >"$work/jaeger.log" 2>&1; then
		cat "$work/jaeger.log" >&2
		exit 1
	fi
	exit 0
fi

for s in nodehb podconfig prober statussync; do
	image "$s" "$s" no "$s"
done
image podworkers podworkers yes podworkers
image splitlet splitlet yes splitlet
image nats nats-server no nats-server controlplane
# kube-proxy runs iptables: this host's (the variant `iptables` names,
# nf_tables or legacy, as the host's own rules use), its extensions and
# the shared libraries ldd lists for them, at their paths.
iptables_rootfs() {
	local root=$1 multi xt lib f
	multi=$(readlink -f "$(command -v iptables)")
	xt=$(dirname "$(readlink -f "$(ldd "$multi" | awk '$1 ~ /^libxtables/ { print $3 }')")")/xtables
	mkdir -p "$root/usr/sbin"
	cp "$multi" "$root/usr/sbin/"
	for f in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
		ln -s "$(basename "$multi")" "$root/usr/sbin/$f"
	done
	mkdir -p "$root$xt"
	cp "$xt"/*.so "$root$xt/"
	while read -r lib; do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done < <(for f in "$multi" "$xt"/*.so; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
}
if ! command -v iptables >/dev/null 2>&1; then
	echo "images: iptables is needed for kube-proxy in splitlet/controlplane (Debian: apt-get install iptables)" >&2
	exit 1
fi
extra_rootfs="$work/iptables"
iptables_rootfs "$extra_rootfs"
image controlplane controlplane no controlplane etcd kube-apiserver kube-controller-manager metrics-server coredns kube-proxy
extra_rootfs=
if $have_tcpprober; then
	image tcpprober tcpprober no tcpprober
else
	echo "images: examples/tcpprober/cmd/tcpprober not there yet: no splitlet/tcpprober image"
fi

# jsprober: FROM scratch too. Node.js is a dynamic executable, so the image
# holds exactly what `ldd` says it loads (and the loader), at their paths.
if [[ -d examples/jsprober/node_modules/nats ]] && command -v node >/dev/null 2>&1; then
	node=$(readlink -f "$(command -v node)")
	ctx="$work/jsprober"
	rootfs="$ctx/rootfs"
	mkdir -p "$rootfs/tmp" "$rootfs/data" "$rootfs/usr/bin" "$rootfs/jsprober"
	chmod 1777 "$rootfs/tmp"
	cp "$node" "$rootfs/usr/bin/node"
	# "lib => /path (addr)", or "/path (addr)" for the loader; vdso has no file.
	while read -r lib; do
		mkdir -p "$rootfs$(dirname "$lib")"
		cp -L "$lib" "$rootfs$lib"
	done < <(ldd "$node" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
	cp -r examples/jsprober/prober.js examples/jsprober/lib examples/jsprober/package.json examples/jsprober/node_modules "$rootfs/jsprober/"
	cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/bin NODE_ENV=production
ENTRYPOINT ["/usr/bin/node", "/jsprober/prober.js"]
DOCKERFILE
	echo "images: splitlet/jsprober:$tag"
	if ! DOCKER_BUILDKIT=0 docker build -q -t "splitlet/jsprober:$tag" "$ctx" >"$work/jsprober.log" 2>&1; then
		cat "$work/jsprober.log" >&2
		exit 1
	fi
	rm -rf "$ctx"
else
	echo "images: no node, or examples/jsprober/node_modules missing (make jsprober-deps): no splitlet/jsprober image"
fi
