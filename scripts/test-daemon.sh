#!/usr/bin/env bash
# Tests of the real mode: brings up a single-machine Slurm (installing Debian's slurm-wlm if
# absent), runs `cargo test -p tessera-daemon` against it and the job SDK's pytest suite against
# the real daemon, tears Slurm down, and exits non-zero if anything failed.
#
# Under CI=true a Slurm that cannot be brought up is a failure (the Slurm tests also fail
# rather than skip); elsewhere the Slurm tests skip.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export SLURM_BASE="${SLURM_BASE:-/tmp/tessera-slurm}"
rc=0

if out=$("$ROOT/scripts/slurm/up.sh"); then
  export "$(printf '%s\n' "$out" | grep '^SLURM_CONF=' | tail -1)"
  trap '"$ROOT/scripts/slurm/down.sh" >/dev/null 2>&1 || true' EXIT
  echo "test-daemon: Slurm is up (SLURM_CONF=$SLURM_CONF)"
else
  echo "test-daemon: could not bring Slurm up" >&2
  [[ "${CI:-}" == true ]] && rc=1
fi

cargo test -p tessera-daemon || rc=1

cargo build -q -p tessera-daemon --bin tesserad || rc=1
export TESSERA_DAEMON_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/tesserad"
PY="${PYTHON:-python3}"
if ! "$PY" -m pytest --version >/dev/null 2>&1; then
  "$PY" -m pip install -q pytest >/dev/null 2>&1 || "$PY" -m pip install -q --break-system-packages pytest >/dev/null 2>&1 || true
fi
"$PY" -m pytest -q "$ROOT/sdk/python" || rc=1

exit "$rc"
