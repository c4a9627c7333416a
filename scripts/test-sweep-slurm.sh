#!/usr/bin/env bash
# End-to-end test of `tessera sweep` on a real Slurm (issue 16): a 24-run sweep submitted as a
# job array spread over the 4 logical nodes, one array task cancelled with scancel while it
# runs, `submit --resume` completes what is missing, and the merged results.csv equals a local
# `tessera sweep run` of the same spec (timing columns aside).
#
# Uses the Slurm named by SLURM_CONF when it answers; otherwise brings up its own with
# scripts/slurm/up.sh on separate ports and state directory, and tears it down at exit.
# Under CI=true a Slurm that cannot be brought up is a failure; elsewhere the test skips.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { echo "test-sweep-slurm: $*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

if ! { [[ -n "${SLURM_CONF:-}" ]] && scontrol ping >/dev/null 2>&1; }; then
  export SLURM_BASE="${SWEEP_SLURM_BASE:-/tmp/tessera-slurm-sweep}"
  export SLURMCTLD_PORT="${SWEEP_SLURMCTLD_PORT:-6827}" SLURMD_BASE_PORT="${SWEEP_SLURMD_BASE_PORT:-17101}"
  if out=$("$ROOT/scripts/slurm/up.sh"); then
    export "$(printf '%s\n' "$out" | grep '^SLURM_CONF=' | tail -1)"
    trap 'SLURM_BASE="$SLURM_BASE" "$ROOT/scripts/slurm/down.sh" >/dev/null 2>&1 || true' EXIT
  else
    say "could not bring Slurm up"
    [[ "${CI:-}" == true ]] && exit 1
    say "SKIP"; exit 0
  fi
fi
say "Slurm: SLURM_CONF=$SLURM_CONF"

cargo build -q -p tessera-cli --bin tessera || fail "build"
T="${CARGO_TARGET_DIR:-$ROOT/target}/debug/tessera"
# The sweep directory must be visible to every node: here all nodes are this machine.
WORK="$(mktemp -d /tmp/tessera-sweep-e2e.XXXXXX)"
"$T" trace generate --jobs 4000 --load 300 --seed 3 -o "$WORK/trace.csv" >/dev/null || fail "trace generate"
cat > "$WORK/spec.yaml" <<SPEC
apiVersion: tessera/v1
kind: Sweep
metadata: {name: e2e}
spec:
  fixed:
    cluster: builtin:default
    trace: $WORK/trace.csv
    round: 300
  axes:
    load: [200, 300, 400]
    seed: [1, 2, 3, 4]
    policy: [fifo, las]
SPEC
n=$("$T" sweep plan "$WORK/spec.yaml" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["runs"]))')
[[ "$n" -ge 24 ]] || fail "plan has $n runs"

# Wait until none of the job's tasks is queued or running (up to 15 minutes: the machine may
# be busy, and these are debug builds).
wait_job() {
  local job=$1
  for _ in $(seq 1800); do
    # Completing tasks (a cancelled one being killed) no longer run anything.
    [[ -z "$(squeue -h -j "$job" -t PENDING,RUNNING,CONFIGURING,SUSPENDED 2>/dev/null)" ]] && return 0
    sleep 0.5
  done
  return 1
}

D="$WORK/slurm-run"
# 16 CPUs per task: a node takes 2 to 4 tasks, so 12 tasks spread over all four nodes.
job=$("$T" sweep submit "$WORK/spec.yaml" --out "$D" --slurm --runs-per-task 2 --cpus-per-task 16) \
  || fail "submit"
say "submitted job $job"
victim=""
for _ in $(seq 600); do
  victim=$(squeue -h -r -j "$job" -t RUNNING -o '%i' | sort -t_ -k2 -n | tail -1)
  [[ -n "$victim" ]] && break
  sleep 0.2
done
[[ -n "$victim" ]] || fail "no task of $job ever ran"
scancel "$victim" || fail "scancel $victim"
say "cancelled task $victim while it ran"
wait_job "$job" || fail "job $job did not finish"
"$T" sweep status "$D" || fail "status"
missing=$("$T" sweep status "$D" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["missing"]+d["failed"])')
[[ "$missing" -ge 1 ]] || fail "the cancelled task left nothing missing (it finished before scancel?)"
nodes=$(cat "$D"/runs/*/params.json | python3 -c '
import json,sys
text=sys.stdin.read(); dec=json.JSONDecoder(); i=0; hosts=set()
while i < len(text):
    while i < len(text) and text[i].isspace(): i+=1
    if i >= len(text): break
    o,i=dec.raw_decode(text,i); hosts.add(o["host"].split()[0])
print(len(hosts))')
say "runs ran on $nodes nodes"
[[ "$nodes" -ge 3 ]] || fail "runs ran on only $nodes nodes"

job2=$("$T" sweep submit --resume --slurm --out "$D") || fail "submit --resume"
say "resubmitted the missing runs as job $job2"
wait_job "$job2" || fail "job $job2 did not finish"
"$T" sweep status "$D" || fail "status"
done_=$("$T" sweep status "$D" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["done"])')
[[ "$done_" == "$n" ]] || fail "after --resume $done_ of $n runs are done"
"$T" sweep collect "$D" || fail "collect"

L="$WORK/local-run"
"$T" sweep run "$WORK/spec.yaml" --out "$L" --threads 2 || fail "local run"
"$T" sweep collect "$L" || fail "collect local"
python3 - "$D/results.csv" "$L/results.csv" <<'PY' || fail "Slurm and local results differ"
import csv, sys
def rows(p):
    with open(p) as f:
        r = list(csv.DictReader(f))
    for row in r:
        row.pop("wall_s", None)
    return r
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert len(a) == 24 and a == b, f"{len(a)} vs {len(b)} rows"
PY
say "PASS: $n runs over $nodes nodes, one task cancelled and resumed, results equal the local run"
rm -rf "$WORK"
