#!/usr/bin/env bash
# train.max_minutes: the run's length comes from the measured step time (the
# log says so and the run stops near the budget, far below train.steps); a
# checkpoint keeps the decided length, so the resumed run ends at the same
# step; a negative budget is a clear usage error.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 60000 >/dev/null
ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set data.val="$TMP/data/val_*.bin" --set train.warmup=2 --set train.eval_every=20
      --set train.eval_batches=2 --set train.threads=1 --set train.steps=1000000
      --set train.max_minutes=0.05 --set checkpoint.every=20 --set checkpoint.async=false)
start=$SECONDS
"$BIN" train "${ARGS[@]}" --nproc 2 --set telemetry.dir="$TMP/run" >"$TMP/log" 2>&1 ||
  { cat "$TMP/log"; fail "budgeted train failed"; }
took=$((SECONDS - start))
grep -q "time budget: 0.05 min; the number of steps (at most 1000000) is decided" "$TMP/log" ||
  { cat "$TMP/log"; fail "no budget announcement"; }
grep -q "ms per step measured" "$TMP/log" || { cat "$TMP/log"; fail "no decision line"; }
steps=$(sed -n 's/^done: \([0-9]*\) steps.*/\1/p' "$TMP/log")
[ -n "$steps" ] && [ "$steps" -gt 6 ] && [ "$steps" -lt 1000000 ] || { cat "$TMP/log"; fail "ran $steps steps"; }
[ "$took" -lt 60 ] || fail "a 3-second budget took ${took}s"
echo "budgeted run: $steps steps in ${took}s"

# Resume from the first checkpoint: the saved length is kept.
first=$(ls -d "$TMP/run/ckpt/step_"* 2>/dev/null | head -1)
if [ -n "$first" ] && [ "$(basename "$first")" != "step_$(printf %08d "$steps")" ]; then
  "$BIN" train "${ARGS[@]}" --nproc 2 --set telemetry.dir="$TMP/run2" \
    --set checkpoint.resume="$first" >"$TMP/log2" 2>&1 || { cat "$TMP/log2"; fail "resume failed"; }
  grep -q "time budget: keeping the saved run length of" "$TMP/log2" || { cat "$TMP/log2"; fail "resume re-decided the length"; }
  steps2=$(sed -n 's/^done: [0-9]* steps.*//p; s/.*keeping the saved run length of \([0-9]*\) steps.*/\1/p' "$TMP/log2" | head -1)
  echo "resumed run kept $steps2 steps"
fi

if "$BIN" train "${ARGS[@]}" --set train.max_minutes=-1 --set telemetry.dir="$TMP/bad" >"$TMP/bad" 2>&1; then
  fail "negative max_minutes accepted"
fi
grep -q "train.max_minutes" "$TMP/bad" || { cat "$TMP/bad"; fail "error does not name train.max_minutes"; }
echo PASS
