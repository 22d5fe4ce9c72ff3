#!/usr/bin/env bash
# Checkpoint and resume with real processes and files (docs/FAULT_TOLERANCE.md):
#  1. a reference run: 12 steps on 2 ranks, a checkpoint every 4 steps;
#  2. the same run killed after step 8 (test hook), then started again: it
#     resumes from step 8, steps 9-12 match the reference bit for bit and so
#     does the model;
#  3. the step-8 checkpoint resumed on 1 rank with micro_batch doubled (same
#     global batch) continues within 1e-5 (another f32 order of the same
#     sums: tests/unit/dp_harness.h; measured equal);
#  4. the newest checkpoint corrupted (one flipped byte): resume falls back to
#     the previous one, says why, and finishes, bit for bit the reference's
#     steps 9-12.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 40000 >/dev/null
ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set train.steps=12 --set train.warmup=2 --set train.lr=3e-3 --set train.eval_every=0
      --set train.threads=1 --set checkpoint.every=4 --set checkpoint.keep_last=0)

source "$(dirname "$0")/lib/losses.sh"  # same_losses

# 1. Reference.
"$BIN" train "${ARGS[@]}" --set train.micro_batch=2 --nproc 2 --set telemetry.dir="$TMP/ref" \
  >"$TMP/log_ref" 2>&1 || { cat "$TMP/log_ref"; fail "reference run failed"; }
grep -q "checkpoint .*step_00000004 (writing in the background; training waited" "$TMP/log_ref" ||
  { cat "$TMP/log_ref"; fail "no checkpoint line"; }
for s in 00000004 00000008 00000012; do
  test -s "$TMP/ref/ckpt/step_$s/index.json" || fail "no checkpoint at step $s"
done

# 2. Killed after step 8, then resumed on the same 2 ranks.
rc=0
MESHTRAIN_TEST_CRASH_AFTER_STEP=8 "$BIN" train "${ARGS[@]}" --set train.micro_batch=2 --nproc 2 \
  --set telemetry.dir="$TMP/a" >"$TMP/log_a1" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "the interrupted run should fail"
test -s "$TMP/a/ckpt/step_00000008/index.json" || { cat "$TMP/log_a1"; fail "no step-8 checkpoint"; }
test ! -e "$TMP/a/ckpt/step_00000012" || fail "the interrupted run went past step 8"
"$BIN" train "${ARGS[@]}" --set train.micro_batch=2 --nproc 2 --set telemetry.dir="$TMP/a" \
  --set checkpoint.resume=auto >"$TMP/log_a2" 2>&1 || { cat "$TMP/log_a2"; fail "resume failed"; }
grep -q "resumed from .*step_00000008 at step 8" "$TMP/log_a2" || { cat "$TMP/log_a2"; fail "did not resume at 8"; }
# The same ranks, layout and state: deterministic, bit for bit (was 1e-6;
# the final model is compared byte for byte below).
same_losses "$TMP/a/metrics.jsonl" "$TMP/ref/metrics.jsonl" 9 0 12 || fail "resumed losses differ"
cmp -s "$TMP/a/model.safetensors" "$TMP/ref/model.safetensors" || fail "resumed final model differs"

# 3. The same checkpoint on 1 rank with micro_batch 4 (global batch 4 as before).
"$BIN" train "${ARGS[@]}" --set train.micro_batch=4 --set telemetry.dir="$TMP/b" \
  --set checkpoint.resume="$TMP/a/ckpt/step_00000008" >"$TMP/log_b" 2>&1 ||
  { cat "$TMP/log_b"; fail "resume on 1 rank failed"; }
grep -q "resumed from .*step_00000008 at step 8" "$TMP/log_b" || { cat "$TMP/log_b"; fail "1-rank run did not resume"; }
grep -q "global batch changed" "$TMP/log_b" && fail "same global batch reported as changed"
same_losses "$TMP/b/metrics.jsonl" "$TMP/ref/metrics.jsonl" 9 1e-5 12 || fail "1-rank resume diverged"

# 4. Newest checkpoint corrupt: fall back to step 8.
mkdir -p "$TMP/c" && cp -r "$TMP/ref/ckpt" "$TMP/c/ckpt"
python3 - "$TMP/c/ckpt/step_00000012/shard_1_of_2.safetensors" <<'PY'
import os, sys
p = sys.argv[1]
with open(p, "r+b") as f:
    f.seek(os.path.getsize(p) - 100)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x40]))
PY
"$BIN" train "${ARGS[@]}" --set train.micro_batch=2 --nproc 2 --set telemetry.dir="$TMP/c" \
  >"$TMP/log_c" 2>&1 || { cat "$TMP/log_c"; fail "run after corruption failed"; }
grep -q "not resuming from .*step_00000012: .*checksum mismatch" "$TMP/log_c" ||
  { cat "$TMP/log_c"; fail "no reason printed for skipping the corrupt checkpoint"; }
grep -q "resumed from .*step_00000008 at step 8" "$TMP/log_c" || { cat "$TMP/log_c"; fail "no fallback to step 8"; }
grep -q "^done: 4 steps" "$TMP/log_c" || { cat "$TMP/log_c"; fail "fallback run did not finish"; }
same_losses "$TMP/c/metrics.jsonl" "$TMP/ref/metrics.jsonl" 9 0 12 || fail "fallback run diverged"  # as in 2.
echo "ok"
