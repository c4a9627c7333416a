#!/usr/bin/env bash
# Tessera's test command (README, and what .ci/run calls). It brings up what the tests need by
# itself: every crate's tests with nextest, then the real-mode tests (scripts/test-daemon.sh:
# installs Slurm from Debian's packages when absent, starts a single-machine Slurm, runs the
# daemon's integration tests and the Python SDK's pytest suite against it, tears it down).
set -uo pipefail
cd "$(dirname "$0")/.."

status=0
cargo nextest run --workspace --exclude tessera-daemon --no-fail-fast || status=1
./scripts/test-daemon.sh || status=1
# tessera sweep on a Slurm job array (it brings up its own Slurm; test-daemon.sh has torn its one down).
./scripts/test-sweep-slurm.sh || status=1
if [ "$status" -ne 0 ]; then
  echo "scripts/test.sh: some tests failed" >&2
fi
exit "$status"
