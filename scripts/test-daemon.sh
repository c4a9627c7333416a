#!/usr/bin/env bash
# Tests of the real mode: brings up a single-machine Slurm (installing Debian's slurm-wlm if
# absent), installs Debian's Chromium if absent (the dashboard's headless-browser test), runs
# `cargo test -p tessera-daemon` against them and the Python SDK's and client's pytest suite
# against the real daemon, tears Slurm down, and exits non-zero if anything failed.
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

if ! command -v chromium >/dev/null 2>&1; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "test-daemon: installing chromium (the dashboard's headless-browser test)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } \
      || echo "test-daemon: could not install chromium" >&2
  else
    echo "test-daemon: chromium absent and cannot be installed here (not root or no apt-get)" >&2
  fi
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
