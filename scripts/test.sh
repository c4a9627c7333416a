#!/usr/bin/env bash
# Tessera's test command (README, and what .ci/run calls). It brings up what the tests need by
# itself: every crate's tests with nextest, then the real-mode tests (scripts/test-daemon.sh:
# installs Slurm from Debian's packages when absent, starts a single-machine Slurm, runs the
# daemon's integration tests and the Python SDK's pytest suite against it, tears it down).
#
# It ends with one line, `N passed, N failed`, summed over nextest, the daemon's cargo tests
# and pytest, so that the verdict is the last thing on the screen. A runner that fails without
# reporting counts (a build error) counts as one failure.
set -uo pipefail
cd "$(dirname "$0")/.."

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

status=0
cargo nextest run --workspace --exclude tessera-daemon --no-fail-fast 2>&1 | tee "$logs/nextest.log"
nextest_rc=${PIPESTATUS[0]}
[ "$nextest_rc" -ne 0 ] && status=1
./scripts/test-daemon.sh 2>&1 | tee "$logs/daemon.log"
daemon_rc=${PIPESTATUS[0]}
[ "$daemon_rc" -ne 0 ] && status=1
# tessera sweep on a Slurm job array (it brings up its own Slurm; test-daemon.sh has torn its one down).
./scripts/test-sweep-slurm.sh || status=1

# Counts from each runner's own summary lines (colour codes stripped):
#   nextest: "Summary [ 12.3s] 120 tests run: 118 passed, 2 failed, 1 skipped"
#   cargo test: "test result: ok. 35 passed; 0 failed; 0 ignored; ..." (one per test binary)
#   pytest: "6 passed, 1 failed in 2.1s" / "6 passed in 2.1s"
count() { # FILE KIND -> "passed failed"
  sed 's/\x1b\[[0-9;]*m//g' "$1" | awk -v kind="$2" '
    function grab(line, word,   m) {
      if (match(line, "[0-9]+ " word)) { m = substr(line, RSTART, RLENGTH); split(m, a, " "); return a[1] }
      return 0
    }
    kind == "nextest" && /^ *Summary \[/ { p += grab($0, "passed"); f += grab($0, "failed") }
    kind == "cargo" && /^test result: / { p += grab($0, "passed"); f += grab($0, "failed") }
    kind == "pytest" && /(passed|failed|error).* in [0-9.]+s/ && !/^test result/ {
      p += grab($0, "passed"); f += grab($0, "failed") + grab($0, "error")
    }
    END { print p + 0, f + 0 }'
}

read -r np nf < <(count "$logs/nextest.log" nextest)
read -r cp cf < <(count "$logs/daemon.log" cargo)
read -r pp pf < <(count "$logs/daemon.log" pytest)
# A test binary that does not compile reports no counts: count each such crate as a failure.
broken=$(sed 's/\x1b\[[0-9;]*m//g' "$logs/daemon.log" | grep '^error: could not compile' | sort -u | wc -l)
if [ "$broken" -gt 0 ]; then
  echo "scripts/test.sh: $broken crate(s) of the real-mode tests did not compile (counted as failures)" >&2
  cf=$((cf + broken))
fi
if [ "$nextest_rc" -ne 0 ] && [ "$nf" -eq 0 ]; then
  echo "scripts/test.sh: nextest failed without reporting failed tests (counted as 1)" >&2
  nf=1
fi
if [ "$daemon_rc" -ne 0 ] && [ $((cf + pf)) -eq 0 ]; then
  echo "scripts/test.sh: the real-mode tests failed without reporting failed tests (counted as 1)" >&2
  pf=1
fi
echo "nextest: $np passed, $nf failed; daemon cargo tests: $cp passed, $cf failed; pytest: $pp passed, $pf failed"
echo "$((np + cp + pp)) passed, $((nf + cf + pf)) failed"
exit "$status"
