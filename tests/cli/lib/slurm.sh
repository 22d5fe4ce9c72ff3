# Sourced by the Slurm tests (run as `bash SCRIPT BINARY SOURCE_DIR`): brings
# up a 2-node cluster (scripts/slurm-local.sh) torn down at exit, exports
# SLURM_CONF, copies the binary to WORK (the cluster's shared directory:
# nodes have their own /tmp), writes token shards there and sets ARGS, a
# small ZeRO-2 training job; diagnose prints what the cluster says.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
. "$(dirname "${BASH_SOURCE[0]}")/losses.sh"
SRC=$(cd "$SRC" && pwd)
CLUSTER=$(mktemp -d -p /var/tmp mt-slurm.XXXXXX)
# A failed test prints what the cluster logged before it is torn down (CI
# keeps only a failed test's output).
cleanup() {
  local status=$?
  if [ "$status" -ne 0 ] && [ "$status" -ne 77 ] && [ -f "$CLUSTER/slurm.conf" ]; then
    echo "---- the cluster when the test failed (status $status)"
    diagnose_logs 2>&1 || true
  fi
  bash "$SRC/scripts/slurm-local.sh" down "$CLUSTER" >/dev/null 2>&1 || true
  rm -rf "$CLUSTER" "$TMP"
}
trap cleanup EXIT
status=0
bash "$SRC/scripts/slurm-local.sh" up 2 "$CLUSTER" || status=$?
[ "$status" -eq 77 ] && exit 77
[ "$status" -eq 0 ] || { tail -5 "$CLUSTER"/*.log 2>/dev/null; fail "slurm-local.sh up failed"; }
export SLURM_CONF="$CLUSTER/slurm.conf"
# What the cluster says, printed before failing.
diagnose() {
  sinfo 2>&1 | head -5
  squeue -a 2>&1 | head -5
  scontrol show job 2>&1 | grep -E "JobId|JobState|Reason|Restarts" | head -8
  tail -5 "$CLUSTER/slurmctld.log" "$CLUSTER"/slurmd.*.log 2>/dev/null
}
# The nodes, the jobs, and the daemons' and jobs' logs (bounded).
diagnose_logs() {
  date
  sinfo -N -o '%N %T %E' 2>&1 | head -5
  scontrol show job 2>&1 | grep -E "JobId|JobState|Reason|Restarts|BeginTime|NodeList" | head -16
  for log in "$CLUSTER/slurmctld.log" "$CLUSTER"/slurmd.*.log; do
    [ -f "$log" ] && { echo "-- $log (last 40 lines)"; tail -40 "$log"; }
  done
  for out in "${WORK:-/nonexistent}"/*.out; do
    [ -f "$out" ] && { echo "-- $out (last 30 lines but metrics)"; grep -av '^[ {}]' "$out" | tail -30; }
  done
}
# The cluster's directory is the shared filesystem: data, binary, results.
WORK="$CLUSTER/work"
mkdir -p "$WORK"
cp "$BIN" "$WORK/meshtrain"  # the nodes' /tmp is their own; a clone may live there
BIN="$WORK/meshtrain"
"$BIN" data synth --out "$WORK/data" --tokens 60000 >/dev/null
ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set data.train="$WORK/data/train_*.bin"
      --set data.val="$WORK/data/val_*.bin" --set train.warmup=2 --set train.lr=3e-3
      --set train.micro_batch=2 --set train.eval_every=0 --set train.threads=1
      --set zero.stage=2 --set parallel.bucket_mb=0.01 --set train.steps=8)
