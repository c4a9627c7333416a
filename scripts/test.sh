#!/usr/bin/env bash
# Tessera's test command (README, and what .ci/run calls). It brings up what the tests need by
# itself: Python's pytest for the job SDK, and a real single-machine Slurm (installed from
# Debian's packages when absent) for the daemon's integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import pytest' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check pytest
fi

slurm_up=false
if [ -x scripts/slurm/up.sh ]; then
  # up.sh installs slurm-wlm when absent; its last line of stdout is `SLURM_CONF=<path>`.
  conf_line="$(scripts/slurm/up.sh | tail -n 1)"
  case "$conf_line" in
    SLURM_CONF=*) export "${conf_line?}" ;;
    *) echo "scripts/slurm/up.sh did not report SLURM_CONF" >&2; exit 1 ;;
  esac
  slurm_up=true
fi
cleanup() { if $slurm_up; then scripts/slurm/down.sh || true; fi; }
trap cleanup EXIT

status=0
cargo nextest run --workspace --no-fail-fast || status=$?
if [ -d sdk/python ]; then
  python3 -m pytest -q sdk/python || status=$?
fi
exit $status
