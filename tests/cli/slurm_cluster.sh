#!/usr/bin/env bash
# A real Slurm cluster (scripts/slurm-local.sh: munge, slurmctld and two
# slurmd nodes, each in its own network namespace with its own /tmp and
# /dev/shm) runs the shipped batch script, examples/slurm/train.sbatch:
# 2 nodes x 2 ranks, ZeRO-2, started by `srun --mpi=pmix`. The ranks take
# their place from Slurm, talk MPI between the nodes, and every step's loss
# equals the single-host run's (--nproc 4 over shared memory) within 1e-5
# (relative; the two-level reduction adds in another order). Then a node
# is killed mid-run and the requeued job resumes from its checkpoint (below).
# Skips, saying why, without root or Slurm's packages; everything is torn
# down, also on failure.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/losses.sh"
SRC=$(cd "$SRC" && pwd)
CLUSTER=$(mktemp -d -p /var/tmp mt-slurm.XXXXXX)
cleanup() {
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
"$BIN" train "${ARGS[@]}" --nproc 4 --set telemetry.dir="$WORK/one_host" \
  >"$WORK/one_host.log" 2>&1 || { tail -20 "$WORK/one_host.log"; fail "single-host run failed"; }
cd "$WORK"
MESHTRAIN="$BIN" timeout 300 sbatch --wait --output="$WORK/job.out" \
  "$SRC/examples/slurm/train.sbatch" "${ARGS[@]}" --set telemetry.dir="$WORK/two_nodes" \
  >"$WORK/sbatch.log" 2>&1 || { cat "$WORK/sbatch.log"; grep -av '^[ {}]' "$WORK/job.out" | tail -30; diagnose; fail "the batch job failed"; }
grep "ZeRO stage 2: 4 ranks over mpi" "$WORK/job.out" >/dev/null ||
  { grep -av '^[ {}]' "$WORK/job.out" | head -20; fail "the job's ranks are not one MPI world"; }
grep -E "on mt[0-9]+h\[1-2\]" "$WORK/job.out" >/dev/null ||
  { head -3 "$WORK/job.out"; fail "the job did not span both nodes"; }
same_losses "$WORK/two_nodes/metrics.jsonl" "$WORK/one_host/metrics.jsonl" 1 1e-5 8

# A node fails mid-run: everything on node 2 is killed (its slurmd, the job
# step, its ranks) after the job's first checkpoints. Node 1's ranks time out
# (10 s) and abort, srun fails, the job is requeued and waits for two nodes;
# node 2 comes back (a fresh /tmp and /dev/shm, as after a reboot); the job
# runs again, resumes from its newest checkpoint and finishes, and every
# step's loss equals an uninterrupted run of the same job bit for bit
# (deterministic mode; a re-run step's last record counts).
LONG=("${ARGS[@]}" --set train.steps=1500 --set checkpoint.every=100 --set deterministic=true)
export MESHTRAIN_COMM_TIMEOUT=10
MESHTRAIN="$BIN" timeout 300 sbatch --wait --output="$WORK/whole.out" "$SRC/examples/slurm/train.sbatch" \
  "${LONG[@]}" --set telemetry.dir="$WORK/whole" >"$WORK/sbatch_whole.log" 2>&1 ||
  { grep -av '^[ {}]' "$WORK/whole.out" | tail -20; fail "the uninterrupted long job failed"; }
job=$(MESHTRAIN="$BIN" sbatch --parsable --output="$WORK/failed.out" "$SRC/examples/slurm/train.sbatch" \
  "${LONG[@]}" --set telemetry.dir="$WORK/failed")
last_step() { [ -s "$1" ] && tail -1 "$1" | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['step'])" || echo 0; }
for _ in $(seq 1800); do [ "$(last_step "$WORK/failed/metrics.jsonl")" -ge 150 ] && break; sleep 0.1; done
[ "$(last_step "$WORK/failed/metrics.jsonl")" -ge 150 ] || { tail -5 "$WORK/failed.out"; fail "the job never reached step 150"; }
node2=$(sed -n 2p "$CLUSTER/hosts/hosts" | awk '{print $2}')
bash "$SRC/scripts/slurm-local.sh" kill-node "$CLUSTER" "$node2"
killed_at=$(last_step "$WORK/failed/metrics.jsonl")
echo "killed $node2 after step $killed_at"
[ "$killed_at" -lt 1400 ] || fail "the job was nearly done (step $killed_at) when the node was killed"
state=""
for _ in $(seq 300); do
  state=$(squeue -h -j "$job" -o %T 2>/dev/null || true)
  [ "$state" = PENDING ] && break
  sleep 0.2
done
[ "$state" = PENDING ] || { scontrol show job "$job"; tail -20 "$WORK/failed.out"; fail "the job was not requeued (state '$state')"; }
bash "$SRC/scripts/slurm-local.sh" start-node "$CLUSTER" "$node2"
for _ in $(seq 1800); do
  state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT) break ;; esac
  sleep 0.2
done
[ "$state" = COMPLETED ] || { scontrol show job "$job"; grep -av '^[ {}]' "$WORK/failed.out" | tail -30; fail "the requeued job ended $state"; }
restarts=$(scontrol show job "$job" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
[ "${restarts:-0}" -ge 1 ] || fail "the job finished without a restart"
grep -E "^meshtrain: job $job \(restart 1\)" "$WORK/failed.out" >/dev/null || fail "no restart line in the job's output"
resumed=$(grep -aE "^resumed from .* at step [0-9]+" "$WORK/failed.out" | head -1)
[ -n "$resumed" ] || { grep -av '^[ {}]' "$WORK/failed.out" | tail -20; fail "the requeued run did not resume from a checkpoint"; }
resumed_step=$(sed -E 's/.* at step ([0-9]+).*/\1/' <<<"$resumed")
[ "$resumed_step" -ge 100 ] && [ "$resumed_step" -le "$killed_at" ] ||
  fail "resumed at step $resumed_step, expected a checkpoint between 100 and $killed_at"
echo "$resumed"
same_losses "$WORK/failed/metrics.jsonl" "$WORK/whole/metrics.jsonl" 1 0 1500
echo "the shipped batch script on a real Slurm cluster of 2 nodes, a node lost and the job requeued: PASS"
