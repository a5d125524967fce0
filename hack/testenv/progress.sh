# Sourced by the build scripts of hack/: progress lines while a long build
# runs. PROGRESS_PREFIX starts each line (default testenv), PROGRESS_HINT
# says how long the build takes.

# progress NAME PID: a line every 30 s while a build runs, so that a first
# `make run` or `make test` (several minutes on 2 cores) shows it is alive.
progress() {
	local name=$1 pid=$2 start=$SECONDS
	while kill -0 "$pid" 2>/dev/null; do
		for _ in $(seq 1 30); do
			kill -0 "$pid" 2>/dev/null || return 0
			sleep 1
		done
		echo "${PROGRESS_PREFIX:-testenv}: still building $name ($((SECONDS - start)) s so far; ${PROGRESS_HINT:-about 5 minutes on 2 cores the first time})"
	done
}

# built NAME CMD...: runs a build command with progress lines, and fails as it does.
built() {
	local name=$1
	shift
	"$@" &
	local pid=$!
	progress "$name" "$pid" &
	local ticker=$!
	local rc=0
	wait "$pid" || rc=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	return "$rc"
}
