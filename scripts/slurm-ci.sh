#!/usr/bin/env bash
# A single-node Slurm cluster for CI (Debian 12: slurm-wlm 22.05 + munge), as
# root, without systemd or cgroups; fake GPUs (character devices) as gres so
# that jobs get CUDA_VISIBLE_DEVICES as on a real GPU node.
#
#   scripts/slurm-ci.sh start   install (once), write the config, start munged,
#                               slurmctld and slurmd, wait for the node to be idle
#   scripts/slurm-ci.sh stop    stop the three daemons (by their pid files) and
#                               wait for them to exit; quiet when none runs
#   scripts/slurm-ci.sh status  print sinfo, or exit 1 when the cluster is down
#
# It writes /etc/slurm/slurm.conf and gres.conf: meant for a CI machine, not a
# machine with a Slurm of its own. State lives in $SLURM_CI_DIR
# (/tmp/kforge-slurm); $SLURM_CI_FAKE_GPUS fake GPUs (2). The recipe is the
# one measured in shared/research/ecosystem-audit.md §4.2.
set -euo pipefail
S=${SLURM_CI_DIR:-/tmp/kforge-slurm}
NGPU=${SLURM_CI_FAKE_GPUS:-2}
H=$(hostname -s)

die() {
  echo "slurm-ci: $*" >&2
  exit 1
}

# Sends TERM to the process in pid file $1 and waits up to 10 s for it to go.
stop_pid_file() {
  local file=$1 pid
  [[ -s $file ]] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

stop() {
  # Jobs first, so that no step outlives its daemons.
  if [[ -s $S/slurmctld.pid ]] && kill -0 "$(cat "$S/slurmctld.pid")" 2>/dev/null; then
    scancel --full --quiet --user=root 2>/dev/null || true
  fi
  stop_pid_file "$S/slurmd.pid"
  stop_pid_file "$S/slurmctld.pid"
  stop_pid_file /run/munge/munged.pid
}

start() {
  [[ $(id -u) -eq 0 ]] || die "needs root (it writes /etc/slurm and runs the daemons)"
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
    ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    echo "slurm-ci: installing slurmctld slurmd slurm-client munge"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      slurmctld slurmd slurm-client munge >/dev/null
  fi
  stop  # a cluster left from an earlier start (a second .ci/run) goes first
  rm -rf "$S"
  mkdir -p "$S"/{state,spool,fake,jobs}
  chmod 1777 "$S/jobs"
  # gres File= must be a character or block device; /dev/null's numbers do.
  for i in $(seq 0 $((NGPU - 1))); do mknod "$S/fake/nvidia$i" c 1 3; done
  if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/slurm
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  local mem
  mem=$(($(free -m | awk '/Mem:/{print $2}') - 512))
  cat >/etc/slurm/slurm.conf <<CONF
# Written by kforge scripts/slurm-ci.sh: a single-node CI cluster.
ClusterName=kforge-ci
SlurmctldHost=${H}(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
NodeName=${H} NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=${mem} Gres=gpu:${NGPU} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  cat >/etc/slurm/gres.conf <<CONF
AutoDetect=off
NodeName=${H} Name=gpu File=$S/fake/nvidia[0-$((NGPU - 1))]
CONF
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 1 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n >/dev/null 2>&1 || die "munged did not come up (see /var/log/munge/munged.log)"
  /usr/sbin/slurmctld -i
  /usr/sbin/slurmd
  for _ in $(seq 1 120); do
    [[ $(sinfo -h -o %T 2>/dev/null) == idle ]] && break
    sleep 0.25
  done
  [[ $(sinfo -h -o %T 2>/dev/null) == idle ]] ||
    die "the node is not idle: $(sinfo -h 2>&1); logs in $S/slurmctld.log and $S/slurmd.log"
  echo "slurm-ci: up: node $H, $(nproc) CPUs, gpu:$NGPU (fake), state in $S"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) sinfo ;;
  *)
    echo "usage: scripts/slurm-ci.sh start|stop|status" >&2
    exit 2
    ;;
esac
