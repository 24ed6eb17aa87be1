#!/bin/sh
# test-ci-step.sh: run ci-step.sh in scratch directories against the real
# programs (on PATH, or in $AGENTPLANE_BIN) and check its exit status, the
# logs it keeps and that it leaves no service behind.
set -u
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
export PYTHON
if [ -n "${AGENTPLANE_BIN:-}" ]; then PATH=$AGENTPLANE_BIN:$PATH; export PATH; fi

passed=0 failed=0
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

free_port() {
	"$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run NAME WANT_EXIT [VAR=VALUE...]: run ci-step.sh with the settings in a
# fresh directory and environment; then check the exit status.
run() {
	name=$1 want=$2
	shift 2
	dir=$root/$name
	mkdir -p "$dir"
	port=$(free_port)
	(cd "$dir" && env AGENTPLANE_STATE_DIR="$dir/.state" PORT="$port" "$@" "$here/ci-step.sh") \
		> "$dir/out" 2> "$dir/err"
	got=$?
	if [ "$got" -ne "$want" ]; then
		fail "$name: exit $got, want $want"
		sed 's/^/    /' "$dir/err" >&2
		return 1
	fi
	# Whatever happened, no job is left and nothing listens on the port.
	left=$(AGENTPLANE_STATE_DIR="$dir/.state" agentjob list -q 'jobs.#')
	if [ "${left:-0}" -ne 0 ]; then fail "$name: $left job(s) left behind"; return 1; fi
	if curl -fsS -o /dev/null "http://127.0.0.1:$port/" 2> /dev/null; then
		fail "$name: the service still answers"
		return 1
	fi
	return 0
}

ok() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }

# check NAME CONDITION...: a named assertion about the last run.
check() {
	name=$1
	shift
	if "$@"; then ok "$name"; else fail "$name"; fi
}

has() { grep -q "$2" "$dir/$1" 2> /dev/null; }

run passes 0 && check "passes: service logs kept" has ci-artifacts/service.stderr.log '"GET / HTTP'

run build-fails 2 BUILD_CMD='echo compile error >&2; exit 2' &&
	check "build-fails: output in the CI log, service never started" \
		sh -c '! [ -e "$1/ci-artifacts/service.stderr.log" ] && grep -q "compile error" "$1/err"' - "$dir"

run build-timeout 124 BUILD_CMD='echo building; sleep 30' BUILD_TIMEOUT=1s &&
	check "build-timeout: reported as a timeout" has err 'status timeout, exit 124'

run tests-fail 22 TEST_CMD='curl -fsS "$SERVICE_URL/missing.html"' &&
	check "tests-fail: curl's status, logs kept" has ci-artifacts/service.stderr.log 'missing.html'

run tests-timeout 124 TEST_CMD='sleep 30' TEST_TIMEOUT=1s &&
	check "tests-timeout: reported as a timeout, logs kept" has err 'status timeout, exit 124'

run service-crashes 1 SERVICE_CMD='echo cannot bind >&2; exit 1' &&
	check "service-crashes: not ready, its stderr kept" has ci-artifacts/service.stderr.log 'cannot bind'

echo "ci-step: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
