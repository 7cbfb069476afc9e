#!/usr/bin/env bash
# A single-node SLURM on this machine, for tests and for trying cluster=slurm.
#
#   scripts/slurm_cluster.sh start    # install (Debian: slurm-wlm, munge) if needed, then start
#   scripts/slurm_cluster.sh status   # exit 0 when the controller answers and the node is up
#   scripts/slurm_cluster.sh stop     # stop what `start` started (by its pid files)
#   scripts/slurm_cluster.sh env      # prints `export SLURM_CONF=...` for sbatch/squeue/gnnrun
#
# Everything lives in $GNNRUN_SLURM_DIR (default /tmp/gnnrun-slurm): its own
# munge key and socket, slurm.conf written for this machine's cores and
# memory (`slurmd -C`), state, logs and pid files. Nothing under /etc is
# changed, so clients need SLURM_CONF (`env` prints it). No cgroups: processes
# are tracked through /proc (proctrack/linuxproc), tasks are not confined
# (task/none), and there is no accounting database (squeue, not sacct, tells
# job states). `start` is idempotent and takes a second or two when SLURM is
# installed and already running.
#
# Exit codes: 0 ok, 1 failed to start, 3 SLURM cannot be installed here
# (not Debian/apt, or not root).
set -euo pipefail

DIR=${GNNRUN_SLURM_DIR:-/tmp/gnnrun-slurm}
CONF=$DIR/slurm.conf
CTLD_PORT=${GNNRUN_SLURM_CTLD_PORT:-6817}
SLURMD_PORT=${GNNRUN_SLURM_SLURMD_PORT:-6818}
export SLURM_CONF=$CONF

say() { echo "slurm_cluster: $*" >&2; }

alive() { # pid file -> 0 when its process runs
    local pid
    pid=$(cat "$1" 2>/dev/null) && [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

install() {
    local missing=()
    for tool in munged mungekey slurmctld slurmd sbatch squeue sinfo scontrol srun; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    if ! command -v apt-get >/dev/null; then
        say "cannot install SLURM: missing ${missing[*]} and no apt-get (install slurm-wlm and munge yourself)"
        exit 3
    fi
    if [[ $(id -u) -ne 0 ]]; then
        say "cannot install SLURM: missing ${missing[*]}; run as root or: sudo apt-get install slurm-wlm munge"
        exit 3
    fi
    say "installing slurm-wlm and munge (apt-get)"
    local apt=(apt-get -y -q -o Dpkg::Use-Pty=0 install --no-install-recommends slurm-wlm munge)
    if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" >"$DIR/apt.log" 2>&1; then
        apt-get -q update >>"$DIR/apt.log" 2>&1 || true
        if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" >>"$DIR/apt.log" 2>&1; then
            say "apt-get could not install slurm-wlm and munge; see $DIR/apt.log"
            exit 3
        fi
    fi
}

write_config() {
    # slurmd -C reports this node as slurmd sees it: name, CPUs, sockets, cores, memory.
    local node
    node=$(slurmd -C | head -1)
    local name=${node#NodeName=}
    name=${name%% *}
    cat >"$CONF" <<EOF
# Written by scripts/slurm_cluster.sh for this machine; rewritten on every start.
ClusterName=gnnrun
SlurmctldHost=$name(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$(id -un)
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
SlurmdTimeout=60
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

node_up() { # the node is idle, mixed or allocated (not down, drained or unknown)
    local state
    state=$(sinfo -h -N -o '%T' 2>/dev/null | head -1) || return 1
    [[ $state =~ ^(idle|mixed|allocated|completing) ]]
}

start() {
    mkdir -p "$DIR"/{munge,state,spool,log}
    install
    if alive "$DIR/munged.pid" && alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid" && node_up; then
        say "already running (SLURM_CONF=$CONF)"
        return 0
    fi
    stop quiet
    [[ -s $DIR/munge/munge.key ]] || mungekey --create --keyfile="$DIR/munge/munge.key" 2>/dev/null ||
        dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1 count=1024 status=none
    chmod 700 "$DIR/munge"
    chmod 600 "$DIR/munge/munge.key"
    munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/munged.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munged.seed"
    write_config
    # -c: start with no jobs from an earlier run; -i: ignore stale state.
    slurmctld -c -i -f "$CONF"
    slurmd -f "$CONF"
    for _ in $(seq 1 60); do
        if node_up; then
            say "running: $(sinfo -h -N -o '%N %c CPUs %m MB %T' | head -1) (SLURM_CONF=$CONF)"
            return 0
        fi
        sleep 0.5
    done
    say "SLURM did not come up within 30 s; logs in $DIR/log:"
    tail -n 5 "$DIR"/log/*.log >&2 || true
    stop quiet
    exit 1
}

drain() { # cancel what is still queued or running, so that no job step outlives slurmd
    local jobs
    jobs=$(squeue -h -t PD,R,CG,S -o %A 2>/dev/null | sort -u) || return 0
    [[ -z $jobs ]] && return 0
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null || true
    for _ in $(seq 1 40); do
        [[ -z $(squeue -h -t PD,R,CG,S -o %A 2>/dev/null) ]] && return 0
        sleep 0.5
    done
    say "jobs still running after scancel: $(squeue -h -o %A | tr '\n' ' ')"
}

stop() {
    local stopped=()
    alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid" && drain
    for daemon in slurmd slurmctld munged; do
        local pidfile=$DIR/$daemon.pid pid
        pid=$(cat "$pidfile" 2>/dev/null) || pid=
        if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
            kill "$pid"
            for _ in $(seq 1 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
            stopped+=("$daemon")
        fi
        rm -f "$pidfile"
    done
    if [[ ${1:-} != quiet ]]; then
        if [[ ${#stopped[@]} -gt 0 ]]; then say "stopped ${stopped[*]}"; else say "was not running"; fi
    fi
}

status() {
    if alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid" && node_up; then
        sinfo -N
        return 0
    fi
    say "not running"
    return 1
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
env) echo "export SLURM_CONF=$CONF" ;;
*)
    echo "usage: $0 {start|stop|status|env}" >&2
    exit 2
    ;;
esac
