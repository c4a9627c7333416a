#!/usr/bin/env bash
# Bring up a single-machine Slurm (Debian's slurm-wlm, 22.05 on bookworm) for Tessera's tests:
# several logical nodes (one slurmd per node on its own port, all on 127.0.0.1) with fake GPUs
# as GRES, including MIG-style types. Non-interactive and re-runnable (it calls down.sh first).
#
# Usage:  scripts/slurm/up.sh            then: export SLURM_CONF=<printed path>
# Env:    SLURM_BASE (state/log dir, default /tmp/tessera-slurm), SLURM_NODES (default 4),
#         SLURMCTLD_PORT (default 6817), SLURMD_BASE_PORT (default 17001),
#         SLURM_INSTALL=1 forces apt-get install, SLURM_FAKE_GPU_CHARDEV=0 uses plain files.
# The last line of stdout is `SLURM_CONF=<path>`.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BASE="${SLURM_BASE:-/tmp/tessera-slurm}"
NNODES="${SLURM_NODES:-4}"
CTLD_PORT="${SLURMCTLD_PORT:-6817}"
SLURMD_BASE_PORT="${SLURMD_BASE_PORT:-17001}"
T0=$(date +%s%N)
elapsed() { local d=$(( ($(date +%s%N) - T0) / 1000000 )); printf "%d.%03d" $((d / 1000)) $((d % 1000)); }
mark() { echo "  [$(elapsed)s] $*" >&2; }

if [[ "${SLURM_INSTALL:-0}" == 1 ]] || ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  if [[ "$(id -u)" != 0 ]]; then echo "up.sh: Slurm is not installed and we are not root" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
  mark "installed slurm-wlm from Debian's packages"
fi

SLURM_BASE="$BASE" "$HERE/down.sh" >/dev/null 2>&1 || true
mkdir -p "$BASE"/{etc,state,spool,log,run,jobs}
chmod 1777 "$BASE/jobs"
CONF="$BASE/etc/slurm.conf"
HOST="$(hostname -s)"

# ---- munge ------------------------------------------------------------------------------
if ! (munge -n 2>/dev/null | unmunge >/dev/null 2>&1); then
  if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  chmod 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  touch "$BASE/run/munged.started-by-us"
  for _ in $(seq 50); do (munge -n | unmunge >/dev/null 2>&1) && break; sleep 0.1; done
fi

# ---- config -------------------------------------------------------------------------------
# Node shapes cycle: n1,n2 = 8x a100; n3 = 4x v100; n4 = MIG slices (7x 1g.10gb + 2x 3g.40gb).
# Partition `gpu` (default) has every node; `v100` only n3 (a daemon whose whole cluster is
# one small node, for preemption tests).
# SlurmdParameters=config_overrides lets slurmd trust these CPUs/RealMemory on a 2-core host.
node_line() {
  local i=$1 port=$((SLURMD_BASE_PORT + $1 - 1))
  local common="NodeName=n$i NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$port Boards=1 SocketsPerBoard=2 ThreadsPerCore=1"
  case $(( (i - 1) % 4 )) in
    0|1) echo "$common CPUs=64 CoresPerSocket=32 RealMemory=512000 Gres=gpu:a100:8 Feature=a100 State=UNKNOWN" ;;
    2)   echo "$common CPUs=32 CoresPerSocket=16 RealMemory=256000 Gres=gpu:v100:4 Feature=v100 State=UNKNOWN" ;;
    3)   echo "$common CPUs=64 CoresPerSocket=32 RealMemory=512000 Gres=gpu:a100_1g.10gb:7,gpu:a100_3g.40gb:2 Feature=mig State=UNKNOWN" ;;
  esac
}
# Slurm 22.05 drops file-less GPUs, so every fake GPU needs a File=. Character devices with the
# nvidia major number (no driver behind them) make slurmstepd export CUDA_VISIBLE_DEVICES.
mkfake() {
  local d=$1 n=$2 k
  for ((k = 0; k < n; k++)); do
    if [[ "${SLURM_FAKE_GPU_CHARDEV:-1}" == 1 ]]; then
      [[ -c "$d/nvidia$k" ]] || { rm -f "$d/nvidia$k"; mknod "$d/nvidia$k" c 195 "$k" 2>/dev/null || touch "$d/nvidia$k"; }
    else
      [[ -f "$d/nvidia$k" ]] || { rm -f "$d/nvidia$k"; touch "$d/nvidia$k"; }
    fi
  done
}
gres_line() {
  local i=$1 d="$BASE/fakedev/n$1"
  mkdir -p "$d"
  case $(( (i - 1) % 4 )) in
    0|1) mkfake "$d" 8; echo "NodeName=n$i Name=gpu Type=a100 File=$d/nvidia[0-7]" ;;
    2)   mkfake "$d" 4; echo "NodeName=n$i Name=gpu Type=v100 File=$d/nvidia[0-3]" ;;
    3)   mkfake "$d" 9
         printf 'NodeName=n%s Name=gpu Type=a100_1g.10gb File=%s/nvidia[0-6]\nNodeName=n%s Name=gpu Type=a100_3g.40gb File=%s/nvidia[7-8]\n' "$i" "$d" "$i" "$d" ;;
  esac
}

cat > "$CONF" <<CONF
ClusterName=tessera
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd.%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
SlurmctldTimeout=30
MinJobAge=600
InactiveLimit=0
KillWait=2
$(for i in $(seq "$NNODES"); do node_line "$i"; done)
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
$( ((NNODES >= 3)) && echo "PartitionName=v100 Nodes=n3 Default=NO MaxTime=INFINITE State=UP OverSubscribe=NO" )
CONF
{ for i in $(seq "$NNODES"); do gres_line "$i"; done; } > "$BASE/etc/gres.conf"
rm -f "$BASE/etc/cgroup.conf"
export SLURM_CONF="$CONF"

# ---- daemons ---------------------------------------------------------------------------------
rm -rf "${BASE:?}/state"/*
slurmctld -c -f "$CONF"
for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
scontrol ping >/dev/null 2>&1 || { echo "slurmctld did not start; see $BASE/log/slurmctld.log" >&2; tail -5 "$BASE/log/slurmctld.log" >&2; exit 1; }
mark "slurmctld answers ping"
for i in $(seq "$NNODES"); do
  mkdir -p "$BASE/spool/n$i"
  slurmd -N "n$i" -f "$CONF"
done
mark "slurmd x$NNODES started"
states=""
for _ in $(seq 150); do
  states=$(sinfo -h -N -o '%T' | sort -u | tr '\n' ' ')
  [[ "$states" == "idle " ]] && break
  sleep 0.2
done
sinfo -N -o '%N %T %c %m %G' >&2
[[ "$states" == "idle " ]] || { echo "nodes not idle: $states" >&2; exit 1; }
mark "all nodes idle"
echo "SLURM_CONF=$CONF"
