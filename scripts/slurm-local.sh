#!/usr/bin/env bash
# A real Slurm cluster on this machine, for the tests and for trying a batch
# script: munge, slurmctld, and N slurmd "nodes", each in its own network
# namespace (scripts/netns-hosts.sh: own address on a bridge, own hostname)
# and its own mount namespace with a private /tmp and /dev/shm, so ranks on
# two nodes share nothing but the network and the cluster's directory (the
# "shared filesystem"). Debian's packages: slurmctld slurmd slurm-client
# munge.
#
#   scripts/slurm-local.sh up N DIR   # DIR/slurm.conf; export SLURM_CONF=DIR/slurm.conf
#   scripts/slurm-local.sh down DIR   # stops every daemon and removes the namespaces
#   scripts/slurm-local.sh kill-node DIR NODE | start-node DIR NODE   # a node fails / returns
#
# DIR must not be under /tmp (each node has its own /tmp); everything is
# written inside it. Needs root (namespaces; slurmd runs jobs as root here);
# exits 77 saying why where that or Slurm is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-}
# start_node DIR NAME: the node's slurmd in its namespaces; a fresh /tmp and
# /dev/shm each time, as after a reboot.
# A killed step leaves its PMIx socket and directory in the spool directory
# (stepd.slurm.pmix.<job>.<step>, pmix.<job>.<step>/), and slurmd 22.05 does
# not remove them when it starts: a requeued job's step of the same id then
# fails to launch there ("Cannot bind() UNIX socket ... Address already in
# use", "Cannot create directory .../pmix.2.0/: File exists"). No step
# survives a reboot, so every step's socket and PMIx directory on the node
# goes (docs/LAUNCH.md, Slurm).
# The spool directory: one path for every node (DIR/spool/node), each node's
# own directory bound there in its mount namespace, as on real nodes. With
# "%n" in SlurmdSpoolDir the PMIx plugin's messages relayed through slurmd
# name the peer's socket with the "%n" unexpanded and are lost (a step whose
# direct connection failed then hangs in its first fence).
start_node() {
  mkdir -p "$1/spool/$2" "$1/spool/node"
  find "$1/spool/$2" -maxdepth 1 -type s -delete
  find "$1/spool/$2" -maxdepth 1 -type d -name 'pmix.*' -exec rm -rf {} +
  ip netns exec "$2" unshare --uts --mount --propagation private sh -c \
    "hostname $2; mount -t tmpfs tmpfs /tmp; mount -t tmpfs tmpfs /dev/shm;
     mount --bind '$1/spool/$2' '$1/spool/node'; slurmd -f '$1/slurm.conf' -N $2"
}
case "$cmd" in
  kill-node)
    # The node fails: SIGKILL to everything on it (slurmd, job steps, ranks).
    dir=$2 ns=$3
    pids=$(ip netns pids "$ns")
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    rm -f "$dir/slurmd.$ns.pid"
    ;;
  start-node)
    # The node comes back (ReturnToService=2 makes it usable again).
    start_node "$2" "$3"
    ;;
  up)
    n=$2 dir=$3
    for tool in munged mungekey slurmctld slurmd srun sinfo; do
      command -v "$tool" >/dev/null ||
        { echo "skipped: $tool not installed (apt-get install slurmctld slurmd slurm-client munge)"; exit 77; }
    done
    [ "$(id -u)" -eq 0 ] || { echo "skipped: slurmd and the namespaces need root"; exit 77; }
    case "$dir" in /tmp/*) echo "slurm-local: DIR must not be under /tmp (nodes have their own)" >&2; exit 2 ;; esac
    mkdir -p "$dir"
    chmod 700 "$dir"
    status=0
    bash "$here/netns-hosts.sh" up "$n" "$dir/hosts" || status=$?
    [ "$status" -eq 0 ] || exit "$status"
    read -r _ bridge_addr <"$dir/hosts/bridge"
    # munge: its own key, socket and files, nothing under /etc or /run.
    mungekey -c -k "$dir/munge.key"
    chmod 600 "$dir/munge.key"
    munged -f -S "$dir/munge.sock" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
      --log-file="$dir/munged.log" --seed-file="$dir/munged.seed"
    mkdir -p "$dir/state"
    nodes=""
    {
      echo "ClusterName=mtlocal"
      echo "SlurmctldHost=$(hostname -s)($bridge_addr)"
      echo "SlurmctldPort=$((16000 + RANDOM % 4000))"
      echo "SlurmdPort=$((20000 + RANDOM % 4000))"
      echo "SlurmUser=root"
      echo "AuthType=auth/munge"
      echo "CredType=cred/munge"
      # cred_expire is also how long a requeued job waits before it may
      # start again (120 s unless set).
      echo "AuthInfo=socket=$dir/munge.sock,cred_expire=10"
      echo "StateSaveLocation=$dir/state"
      echo "SlurmdSpoolDir=$dir/spool/node"
      echo "SlurmctldPidFile=$dir/slurmctld.pid"
      echo "SlurmdPidFile=$dir/slurmd.%n.pid"
      echo "SlurmctldLogFile=$dir/slurmctld.log"
      echo "SlurmdLogFile=$dir/slurmd.%n.log"
      # No cgroup hierarchy of our own: processes are tracked by their parents.
      echo "ProctrackType=proctrack/linuxproc"
      echo "TaskPlugin=task/none"
      echo "JobAcctGatherType=jobacct_gather/none"
      echo "AccountingStorageType=accounting_storage/none"
      echo "SchedulerType=sched/builtin"
      echo "SelectType=select/cons_tres"
      echo "SelectTypeParameters=CR_CPU"
      echo "MpiDefault=none"
      echo "MailProg=/bin/true"
      echo "ReturnToService=2"
      echo "JobRequeue=1"
      echo "SlurmdTimeout=10"
      echo "KillWait=5"
      while read -r addr ns _; do
        # nproc --all: plain nproc follows OMP_NUM_THREADS (ctest sets 1).
        echo "NodeName=$ns NodeAddr=$addr CPUs=$(nproc --all) State=UNKNOWN"
        nodes="$nodes${nodes:+,}$ns"
      done <"$dir/hosts/hosts"
      echo "PartitionName=main Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
    } >"$dir/slurm.conf"
    printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' >"$dir/cgroup.conf"
    slurmctld -f "$dir/slurm.conf" -i
    while read -r _ ns _; do
      # The node's processes reach the controller and srun through the bridge.
      ip -n "$ns" route add default via "$bridge_addr"
      start_node "$dir" "$ns"
    done <"$dir/hosts/hosts"
    for _ in $(seq 100); do
      idle=$(SLURM_CONF="$dir/slurm.conf" sinfo -h -t idle -o '%D' 2>/dev/null | head -1)
      [ "${idle:-0}" = "$n" ] && { echo "slurm-local: $n nodes idle ($nodes)"; exit 0; }
      sleep 0.2
    done
    echo "slurm-local: the nodes did not come up; see $dir/slurmctld.log and $dir/slurmd.*.log" >&2
    exit 1
    ;;
  down)
    dir=$2
    for pidfile in "$dir"/slurmd.*.pid "$dir/slurmctld.pid" "$dir/munged.pid"; do
      [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    sleep 0.5
    for pidfile in "$dir"/slurmd.*.pid "$dir/slurmctld.pid" "$dir/munged.pid"; do
      [ -f "$pidfile" ] && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
      rm -f "$pidfile"
    done
    bash "$here/netns-hosts.sh" down "$dir/hosts"
    ;;
  *)
    echo "usage: $0 up N DIR | down DIR" >&2
    exit 2
    ;;
esac
