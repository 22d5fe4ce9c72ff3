#!/usr/bin/env bash
# An asynchronous checkpoint's snapshot is copied on a background thread while
# the next step's forward and backward run; the next optimizer update waits for
# it. With the copy delayed by a test hook (MESHTRAIN_TEST_SNAPSHOT_DELAY_MS),
# a 2-rank run that saves at step 3 and trains on to step 6 must still write
# exactly the step-3 state: its shard files are byte-identical to those of a
# run that stops at step 3 and saves synchronously. ZeRO stages 0, 1 and 3
# (the update is the only writer of parameters and optimizer state in each).
# The metrics show the step-4 update waiting for the delayed copy.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 40000 >/dev/null
ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set train.warmup=2 --set train.lr=3e-3 --set train.eval_every=0 --set train.threads=1
      --set train.micro_batch=2 --set deterministic=true --set checkpoint.every=3
      --set checkpoint.keep_last=0 --nproc 2)

for stage in 0 1 3; do
  # Trains on past the save; the snapshot copy starts 600 ms after save().
  MESHTRAIN_TEST_SNAPSHOT_DELAY_MS=600 "$BIN" train "${ARGS[@]}" --set zero.stage=$stage \
    --set train.steps=6 --set telemetry.dir="$TMP/async$stage" >"$TMP/log_async$stage" 2>&1 ||
    { cat "$TMP/log_async$stage"; fail "stage $stage: async run failed"; }
  # The reference: stops at step 3 and writes synchronously.
  "$BIN" train "${ARGS[@]}" --set zero.stage=$stage --set train.steps=3 \
    --set checkpoint.async=false --set telemetry.dir="$TMP/sync$stage" >"$TMP/log_sync$stage" 2>&1 ||
    { cat "$TMP/log_sync$stage"; fail "stage $stage: sync run failed"; }
  a="$TMP/async$stage/ckpt/step_00000003" b="$TMP/sync$stage/ckpt/step_00000003"
  test -s "$a/index.json" && test -s "$b/index.json" || fail "stage $stage: missing step-3 checkpoint"
  n=0
  for f in "$b"/shard_*.safetensors; do
    cmp -s "$f" "$a/$(basename "$f")" ||
      fail "stage $stage: $(basename "$f") of the async save differs from the step-3 state"
    n=$((n + 1))
  done
  [ "$n" -eq 2 ] || fail "stage $stage: expected 2 shard files, found $n"
  # The async run really trained on (its step-6 state differs from step 3's).
  cmp -s "$a/$(basename "$f")" "$TMP/async$stage/ckpt/step_00000006/$(basename "$f")" &&
    fail "stage $stage: steps 3 and 6 saved the same state"
  # Step 4's update waited for the delayed copy (most of the 600 ms).
  python3 - "$TMP/async$stage/metrics.jsonl" "$stage" <<'PY'
import json, sys
recs = {r["step"]: r for r in map(json.loads, filter(str.strip, open(sys.argv[1])))}
w = recs[4].get("ckpt_snapshot_wait_ms", 0)
assert w > 300, f"stage {sys.argv[2]}: step 4's update waited {w} ms for the snapshot, expected most of 600"
assert "ckpt_snapshot_wait_ms" not in recs[5], "stage %s: step 5 waited too" % sys.argv[2]
print(f"stage {sys.argv[2]}: the step-4 update waited {w:.0f} ms for the snapshot")
PY
done
echo "ok: async snapshots equal the state at save time (stages 0, 1, 3)"
