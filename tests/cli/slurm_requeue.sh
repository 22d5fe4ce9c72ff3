#!/usr/bin/env bash
# A node of the real Slurm cluster (tests/cli/lib/slurm.sh) fails mid-run
# and the requeued job resumes from its checkpoint.
set -euo pipefail
. "$(dirname "$0")/lib/slurm.sh"
cd "$WORK"
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
echo "$(date +%T) the uninterrupted job finished"
job=$(MESHTRAIN="$BIN" sbatch --parsable --output="$WORK/failed.out" "$SRC/examples/slurm/train.sbatch" \
  "${LONG[@]}" --set telemetry.dir="$WORK/failed")
last_step() { [ -s "$1" ] && tail -1 "$1" | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['step'])" || echo 0; }
for _ in $(seq 1800); do [ "$(last_step "$WORK/failed/metrics.jsonl")" -ge 150 ] && break; sleep 0.1; done
[ "$(last_step "$WORK/failed/metrics.jsonl")" -ge 150 ] || { tail -5 "$WORK/failed.out"; fail "the job never reached step 150"; }
node2=$(sed -n 2p "$CLUSTER/hosts/hosts" | awk '{print $2}')
bash "$SRC/scripts/slurm-local.sh" kill-node "$CLUSTER" "$node2"
killed_at=$(last_step "$WORK/failed/metrics.jsonl")
echo "$(date +%T) killed $node2 after step $killed_at"
[ "$killed_at" -lt 1400 ] || fail "the job was nearly done (step $killed_at) when the node was killed"
state=""
for _ in $(seq 300); do
  state=$(squeue -h -j "$job" -o %T 2>/dev/null || true)
  [ "$state" = PENDING ] && break
  sleep 0.2
done
[ "$state" = PENDING ] || { scontrol show job "$job"; tail -20 "$WORK/failed.out"; fail "the job was not requeued (state '$state')"; }
echo "$(date +%T) job $job requeued; $node2 starts again"
bash "$SRC/scripts/slurm-local.sh" start-node "$CLUSTER" "$node2"
for _ in $(seq 1800); do
  state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT) break ;; esac
  sleep 0.2
done
[ "$state" = COMPLETED ] || { scontrol show job "$job"; grep -av '^[ {}]' "$WORK/failed.out" | tail -30; fail "the requeued job ended $state"; }
echo "$(date +%T) job $job ended $state"
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
echo "a node lost and the job requeued on a real Slurm cluster: PASS"
