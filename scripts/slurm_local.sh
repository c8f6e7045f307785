#!/usr/bin/env bash
# A one-node Slurm cluster on this machine (Debian's slurm-wlm + munge), for the Slurm launcher's tests
# and for trying `env_launcher: slurm` without a cluster. Idempotent: installs what is missing, writes the
# config once, starts the daemons that are not running, then waits until `srun -n1 hostname` answers.
# Needs root (apt-get, /etc/slurm). Prints `slurm-local: ready` on success; exits non-zero with the reason.
set -euo pipefail

say() { echo "slurm-local: $*" >&2; }
fail() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (it installs packages and writes /etc/slurm)"
# Several test workers may ask at once: one sets the cluster up, the others wait for it.
exec 9>/run/hermes-slurm-local.lock
flock 9

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || fail "slurm-wlm and munge are not installed and there is no apt-get"
    say "installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q slurm-wlm munge >/dev/null; } \
        || fail "apt-get install slurm-wlm munge failed"
fi

# munge: a key only munge can read.
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n >/dev/null 2>&1; then
    # (9>&-: a daemon must not inherit the setup lock, or it holds it for as long as it lives.)
    su -s /bin/sh munge -c /usr/sbin/munged 9>&- || /usr/sbin/munged --force 9>&- || fail "munged did not start"
    for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n >/dev/null 2>&1 || fail "munged started but does not answer"
fi

node=$(hostname -s)
conf=/etc/slurm/slurm.conf
mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 / 2}' /proc/meminfo)  # half the machine for jobs
cpus=$(nproc)
# Cores and memory may be shared by several jobs (OverSubscribe, a small default memory per CPU): the
# tests' workers are light, and several test runs share the one node.
wanted="# hermes-rl one-node cluster (scripts/slurm_local.sh)
ClusterName=hermes-local
SlurmctldHost=$node
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
MinJobAge=300
KillWait=10
SlurmctldTimeout=30
SlurmdTimeout=30
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
DefMemPerCPU=256
NodeName=$node CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:16"
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$wanted" ]; then
    if [ -f "$conf" ] && ! grep -q "^# hermes-rl one-node cluster" "$conf"; then
        fail "$conf exists and is not ours; not touching it"
    fi
    say "writing $conf for node $node ($cpus CPUs, $mem_mb MB)"
    install -d /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
    printf '%s\n' "$wanted" >"$conf"
    # Daemons running on an older config start again on this one.
    for daemon in slurmd slurmctld; do
        pid=$(pgrep -x "$daemon" || true)
        if [ -n "$pid" ]; then
            kill "$pid"
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
    done
fi

pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld 9>&- || fail "slurmctld did not start (see /var/log/slurm/slurmctld.log)"
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd 9>&- || fail "slurmd did not start (see /var/log/slurm/slurmd.log)"

for _ in $(seq 100); do
    if timeout 10 srun -n1 -t 1 -J hermes-slurm-local-check hostname >/dev/null 2>&1 9>&-; then
        say "ready"
        exit 0
    fi
    # A node that was down when the daemons last stopped comes back here.
    scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
    sleep 0.3
done
fail "the cluster does not run jobs: $(sinfo -h -o '%N %T %E' 2>&1 | head -1) (see /var/log/slurm/)"
