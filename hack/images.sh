#!/usr/bin/env bash
# make images: FROM scratch images of the host-built static binaries in the
# given bin directory. No registry is needed: nothing is pulled.
set -euo pipefail
bin=${1:?usage: images.sh BIN_DIR}
tag=${IMAGE_TAG:-dev}
if ! docker info >/dev/null 2>&1; then
	echo "images: no Docker engine answers; start dockerd first" >&2
	exit 1
fi
for name in splitlet nodehb podconfig podworkers prober statussync; do
	ctx=$(mktemp -d)
	trap 'rm -rf "$ctx"' EXIT
	cp "$bin/$name" "$ctx/$name"
	cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY $name /$name
ENTRYPOINT ["/$name"]
DOCKERFILE
	docker build --pull=false -q -t "splitlet/$name:$tag" "$ctx"
	rm -rf "$ctx"
	trap - EXIT
done
