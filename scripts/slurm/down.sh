#!/usr/bin/env bash
# Stop what up.sh started (by PID file only, never by process name), then remove runtime state.
# Re-runnable. Usage: scripts/slurm/down.sh   (Env: SLURM_BASE, default /tmp/tessera-slurm)
set -uo pipefail
BASE="${SLURM_BASE:-/tmp/tessera-slurm}"
RUN="$BASE/run"
stop_pids() { # pidfile... : TERM all, wait up to 10 s, then KILL leftovers
  local f pids=()
  for f in "$@"; do [[ -s "$f" ]] && pids+=("$(cat "$f")"); rm -f "$f"; done
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null
  for _ in $(seq 100); do kill -0 "${pids[@]}" 2>/dev/null || break; sleep 0.1; done
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null; done
  return 0
}
if [[ -d "$RUN" ]]; then
  export SLURM_CONF="$BASE/etc/slurm.conf"
  if [[ -s "$RUN/slurmctld.pid" ]] && kill -0 "$(cat "$RUN/slurmctld.pid")" 2>/dev/null; then
    jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    # shellcheck disable=SC2086
    [[ -n "${jobs// }" ]] && scancel $jobs 2>/dev/null
    for _ in $(seq 100); do [[ -z "$(squeue -h -t R,CG,S 2>/dev/null)" ]] && break; sleep 0.1; done
  fi
  shopt -s nullglob
  stop_pids "$RUN"/slurmd.*.pid "$RUN/slurmctld.pid"
  if [[ -e "$RUN/munged.started-by-us" ]]; then
    stop_pids /run/munge/munged.pid
    rm -f "$RUN/munged.started-by-us"
  fi
fi
rm -rf "$BASE/state" "$BASE/spool"
echo "slurm down"
