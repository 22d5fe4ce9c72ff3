#!/usr/bin/env bash
# Training across two emulated hosts vs on one: dp 4 as 2 hosts x 2 ranks
# (network namespaces joined by a bridge, scripts/netns-hosts.sh; mpirun
# starting its daemons in them; shared memory within a host, MPI over TCP
# between) against the same 4 ranks on one host (`meshtrain train --nproc 4`,
# shared memory), interleaved, the median of each run's steady-state
# tokens/s. The network is virtual (a veth pair and a bridge in one kernel),
# so the ratio measures what meshtrain adds when its ranks span machines,
# not a real network. Needs root (namespaces) and Open MPI.
#
#   sudo bash bench/multinode_vs_one_host.sh [BINARY] [REPS] [PRESET]
# MESHTRAIN_BENCH_RANKS_PER_HOST (default 2) sets the ranks per host (dp = twice that);
# MESHTRAIN_BENCH_MPI_EXTRA adds mpirun options (e.g. "--mca mpi_yield_when_idle 1"),
# MESHTRAIN_BENCH_TRAIN_EXTRA train options for both sides (e.g. "--set comm.grad_dtype=bf16").
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "${1:-$SRC/build/bin/meshtrain}")
REPS=${2:-3}
PRESET=${3:-char-4L}
PER_HOST=${MESHTRAIN_BENCH_RANKS_PER_HOST:-2}
NP=$((2 * PER_HOST))
[ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces)"; exit 1; }
TMP=$(mktemp -d)
HOSTS="$TMP/hosts"
cleanup() { bash "$SRC/scripts/netns-hosts.sh" down "$HOSTS" >/dev/null 2>&1 || true; rm -rf "$TMP"; }
trap cleanup EXIT
bash "$SRC/scripts/netns-hosts.sh" up 2 "$HOSTS" >/dev/null
read -r h1 _ _ < <(sed -n 1p "$HOSTS/hosts")
read -r h2 _ _ < <(sed -n 2p "$HOSTS/hosts")
subnet="${h1%.*}.0/24"
# --bind-to none: the emulated hosts share this machine's cores, and each
# host's daemon would bind its ranks to the same first cores (1 rank per
# host: both ranks on core 0, half the speed).
MPIRUN=(mpirun --allow-run-as-root --bind-to none -np "$NP" -H "$h1:$PER_HOST,$h2:$PER_HOST" --mca plm_rsh_agent "$HOSTS/agent"
  --mca oob_tcp_if_include "$subnet" --mca btl_tcp_if_include "$subnet" --mca btl self,vader,tcp ${MESHTRAIN_BENCH_MPI_EXTRA:-})

"$BIN" data synth --out "$TMP/data" --tokens 400000 >/dev/null
ARGS=(--set model.preset="$PRESET" --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set train.steps=30 --set train.micro_batch=2 --set train.eval_every=0 --set train.threads=1
      --set telemetry.peak_gflops=1 ${MESHTRAIN_BENCH_TRAIN_EXTRA:-})

# The steady-state rate a run printed ("throughput: N tokens/s ...").
rate() { sed -n 's/^throughput: \([0-9.]*\) tokens\/s.*/\1/p' "$1" | tail -1; }
one=() two=()
for r in $(seq "$REPS"); do
  "$BIN" train "${ARGS[@]}" --nproc "$NP" --set telemetry.dir="$TMP/one_$r" >"$TMP/one_$r.log" 2>&1 ||
    { tail -20 "$TMP/one_$r.log"; exit 1; }
  "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --set telemetry.dir="$TMP/two_$r" >"$TMP/two_$r.log" 2>&1 ||
    { tail -20 "$TMP/two_$r.log"; exit 1; }
  grep "$NP ranks over mpi" "$TMP/two_$r.log" >/dev/null || { echo "the two-host run is not over MPI"; exit 1; }
  one+=("$(rate "$TMP/one_$r.log")") two+=("$(rate "$TMP/two_$r.log")")
  echo "round $r: one host ${one[-1]} tokens/s, two hosts ${two[-1]} tokens/s"
done
# Where the time went in the last round (rank 0's step breakdown).
for side in one two; do
  echo "$side host(s), last round:"
  sed -n '/^  phase /,/^  comm total/p' "$TMP/${side}_$REPS.log"
done
python3 - "${one[*]}" "${two[*]}" "$PRESET" "$PER_HOST" <<'PY'
import statistics, sys
one = [float(x) for x in sys.argv[1].split()]
two = [float(x) for x in sys.argv[2].split()]
m1, m2 = statistics.median(one), statistics.median(two)
k = int(sys.argv[4])
print(f"{sys.argv[3]}, dp {2 * k}, median of {len(one)} interleaved rounds: one host {m1:.0f} tokens/s, "
      f"2 hosts x {k} rank(s) {m2:.0f} tokens/s, ratio {m2 / m1:.3f} (target >= 0.90)")
PY
