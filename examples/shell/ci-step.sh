#!/bin/sh
# ci-step.sh: build, start the service, wait until it answers, test against
# it, keep its logs, stop it, and exit with the status that explains what
# failed: the build's or the tests' own exit code, 124 for a timeout, 1 when
# the service never became ready.
#
# Every step is one agentplane call read with -q, so the script needs no
# JSON tool. Settings (environment variables, with the demo defaults):
#   BUILD_CMD       the build                    (writes site/index.html)
#   BUILD_TIMEOUT   its time limit               (5m)
#   PORT            the service's port           (8000)
#   SERVICE_CMD     the service                  ($PYTHON -m http.server on PORT)
#   READY_URL       answers once it is up        (http://127.0.0.1:$PORT/)
#   TEST_CMD        the tests, given SERVICE_URL (curl the page, expect "hello")
#   TEST_TIMEOUT    their time limit             (10m)
#   ARTIFACTS       where logs are written       (./ci-artifacts)
set -u

PYTHON=${PYTHON:-python3}
PORT=${PORT:-8000}
BUILD_CMD=${BUILD_CMD:-'mkdir -p site && echo "<h1>hello</h1>" > site/index.html'}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-5m}
SERVICE_CMD=${SERVICE_CMD:-"exec $PYTHON -m http.server $PORT --bind 127.0.0.1 --directory site"}
READY_URL=${READY_URL:-"http://127.0.0.1:$PORT/"}
TEST_CMD=${TEST_CMD:-'curl -fsS "$SERVICE_URL" | grep -q hello'}
TEST_TIMEOUT=${TEST_TIMEOUT:-10m}
ARTIFACTS=${ARTIFACTS:-ci-artifacts}

say() { printf 'ci-step: %s\n' "$*" >&2; }

mkdir -p "$ARTIFACTS" || exit 1

# 1. Build. agentsh exits with the build's own status (124 on timeout);
#    --tee shows the output live in the CI log.
say "build (timeout $BUILD_TIMEOUT)"
status=$(agentsh --tee --timeout "$BUILD_TIMEOUT" -q status -c "$BUILD_CMD")
rc=$?
if [ "$rc" -ne 0 ]; then
	say "build failed: status $status, exit $rc"
	exit "$rc"
fi

# 2. Start the service and wait until it answers (or fails).
say "start the service on port $PORT"
job=$(agentjob start -q handle --name "ci-service-$$" --ready-http "$READY_URL" \
	--ready-timeout 30s --wait-ready -c "$SERVICE_CMD")
if [ -z "$job" ]; then
	say "the service could not be started"
	exit 1
fi

# From here on the service is stopped and its logs are kept however we leave.
finish() {
	agentjob logs "$job" --stream stdout -q data > "$ARTIFACTS/service.stdout.log"
	agentjob logs "$job" --stream stderr -q data > "$ARTIFACTS/service.stderr.log"
	agentjob stop "$job" -q status > /dev/null
	agentjob rm "$job" -q success > /dev/null
	say "service logs in $ARTIFACTS/"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ready=$(agentjob status "$job" -q status)
if [ "$ready" != ready ]; then
	say "the service is $ready, not ready"
	exit 1
fi

# 3. Test against it.
say "test (timeout $TEST_TIMEOUT)"
status=$(agentsh --tee --timeout "$TEST_TIMEOUT" --env "SERVICE_URL=$READY_URL" -q status -c "$TEST_CMD")
rc=$?
if [ "$rc" -ne 0 ]; then
	say "tests failed: status $status, exit $rc"
else
	say "tests passed"
fi
exit "$rc"
