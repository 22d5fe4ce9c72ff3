#!/usr/bin/env bash
# A user's path end to end on the tiny preset: synth data, train a few steps
# (progress, metrics, resolved config, model file), then sample from the model
# and fine-tune from it with init_from.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 60000 >/dev/null
"$BIN" train --set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin" \
  --set data.val="$TMP/data/val_*.bin" --set train.steps=30 --set train.warmup=5 \
  --set train.lr=3e-3 --set train.eval_every=15 --set train.eval_batches=4 \
  --set telemetry.dir="$TMP/run" --set train.threads=1 >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "train failed"; }
cat "$TMP/log" | tail -8
grep -q '"lr": 0.003' "$TMP/log" || fail "resolved configuration not printed with the override"
grep -q "step 30/30" "$TMP/log" || fail "no progress line for the last step"
grep -q "val loss" "$TMP/log" || fail "no validation line"
test -s "$TMP/run/model.safetensors" || fail "no model file"
test -s "$TMP/run/config.json" || fail "no saved config"
[ "$(wc -l <"$TMP/run/metrics.jsonl")" -eq 30 ] || fail "metrics.jsonl should have 30 lines"
# Loss went down: first vs last logged loss.
python3 - "$TMP/run/metrics.jsonl" <<'PY' || fail "loss did not decrease"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows[-1]["loss"] < rows[0]["loss"] - 0.5, (rows[0]["loss"], rows[-1]["loss"])
assert all(r["step_ms"] > 0 for r in rows)
PY

out=$("$BIN" sample --model "$TMP/run/model.safetensors" --prompt "The " --tokens 40 --threads 1)
[ ${#out} -ge 40 ] || fail "sample printed too little: '$out'"

# Fine-tune from the saved model: config comes from the file.
"$BIN" train --set model.preset="" --set init_from="$TMP/run/model.safetensors" \
  --set data.train="$TMP/data/train_*.bin" --set train.steps=3 --set train.eval_every=0 \
  --set telemetry.dir="$TMP/run2" --set train.threads=1 >"$TMP/log2" 2>&1 || { cat "$TMP/log2"; fail "fine-tune failed"; }
grep -q "loaded weights from" "$TMP/log2" || fail "init_from not loaded"
echo "ok"
