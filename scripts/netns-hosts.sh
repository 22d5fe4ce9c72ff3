#!/usr/bin/env bash
# Emulated hosts for the multi-node tests: N network namespaces on one Linux
# machine, each with its own address on a private bridge (and its own
# hostname when a command enters it through the agent below), so MPI and
# Slurm see N machines joined by a real (virtual) network link that a test
# can cut or slow (`ip link set down`, `tc netem`).
#
#   scripts/netns-hosts.sh up N DIR   # namespaces, bridge, DIR/hosts, DIR/agent
#   scripts/netns-hosts.sh down DIR   # removes what `up` made (also after a failure)
#
# DIR/hosts lists "address namespace link" per host; DIR/agent is an rsh
# agent for Open MPI (`--mca plm_rsh_agent DIR/agent`): `agent ADDRESS CMD...`
# runs CMD in that host's namespace under its own hostname (no sshd). The
# bridge's address (first line of DIR/bridge) is the host machine's side.
# Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN); exits 77 saying why when
# namespaces cannot be made here.
set -euo pipefail
cmd=${1:-}
case "$cmd" in
  up)
    n=$2 dir=$3
    mkdir -p "$dir"
    # A short id keeps interface names under 15 characters and lets tests
    # run side by side; the subnet is derived from it.
    id=$(( ($$ % 200) + 20 ))
    while ip link show "mtbr$id" >/dev/null 2>&1; do id=$(( (id + 1) % 220 + 20 )); done
    if ! ip netns add "mt${id}probe" 2>"$dir/netns_error"; then
      echo "skipped: cannot create network namespaces here ($(head -1 "$dir/netns_error"))"
      exit 77
    fi
    ip netns del "mt${id}probe"
    echo "mtbr$id 10.231.$id.1" >"$dir/bridge"
    ip link add "mtbr$id" type bridge
    ip addr add "10.231.$id.1/24" dev "mtbr$id"
    ip link set "mtbr$id" up
    : >"$dir/hosts"
    for i in $(seq 1 "$n"); do
      ns="mt${id}h$i" addr="10.231.$id.$((i + 1))" link="mt${id}v$i"
      ip netns add "$ns"
      ip link add "$link" type veth peer name eth0 netns "$ns"
      ip link set "$link" master "mtbr$id" up
      ip -n "$ns" addr add "$addr/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up
      echo "$addr $ns $link" >>"$dir/hosts"
    done
    cat >"$dir/agent" <<AGENT
#!/usr/bin/env bash
# rsh agent for Open MPI over the emulated hosts in $dir/hosts.
set -euo pipefail
addr=\$1; shift
ns=\$(awk -v a="\$addr" '\$1 == a { print \$2 }' "$dir/hosts")
[ -n "\$ns" ] || { echo "agent: \$addr is not one of the emulated hosts" >&2; exit 1; }
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns; \$*"
AGENT
    chmod +x "$dir/agent"
    ;;
  down)
    dir=$2
    [ -f "$dir/hosts" ] || exit 0
    while read -r _ ns link; do
      # Whatever still runs in a namespace goes with it.
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
      ip link del "$link" 2>/dev/null || true
      ip netns del "$ns" 2>/dev/null || true
    done <"$dir/hosts"
    read -r bridge _ <"$dir/bridge"
    ip link del "$bridge" 2>/dev/null || true
    rm -f "$dir/hosts"
    ;;
  *)
    echo "usage: $0 up N DIR | down DIR" >&2
    exit 2
    ;;
esac
