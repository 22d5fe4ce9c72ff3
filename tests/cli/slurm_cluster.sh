#!/usr/bin/env bash
# A real Slurm cluster (scripts/slurm-local.sh: munge, slurmctld and two
# slurmd nodes, each in its own network namespace with its own /tmp and
# /dev/shm) runs the shipped batch script, examples/slurm/train.sbatch:
# 2 nodes x 2 ranks, ZeRO-2, started by `srun --mpi=pmix`. The ranks take
# their place from Slurm, talk MPI between the nodes, and every step's loss
# equals the single-host run's (--nproc 4 over shared memory) within 1e-5
# (relative; the two-level reduction adds in another order). Skips, saying
# why, without root or Slurm's packages; everything is torn down, also on
# failure (tests/cli/lib/slurm.sh).
set -euo pipefail
. "$(dirname "$0")/lib/slurm.sh"
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
echo "the shipped batch script on a real Slurm cluster of 2 nodes: PASS"
