#!/usr/bin/env bash
# init_from a checkpoint directory: training starts from the checkpoint's
# weights with a fresh optimizer (step 0, AdamW moments zero), exactly as from
# the same weights exported to a model file; a step directory and a root (its
# newest complete checkpoint) both work; wrong inputs are clear errors.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 40000 >/dev/null
ARGS=(--set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin" --set train.warmup=2
      --set train.lr=3e-3 --set train.eval_every=0 --set train.threads=1 --set train.micro_batch=4
      --set checkpoint.keep_last=0)

# A: 8 steps, checkpoints at 4 and 8.
"$BIN" train "${ARGS[@]}" --set model.preset=tiny --set train.steps=8 --set checkpoint.every=4 \
  --set telemetry.dir="$TMP/a" >"$TMP/log_a" 2>&1 || { cat "$TMP/log_a"; fail "run A failed"; }
"$BIN" ckpt export "$TMP/a/ckpt/step_00000008" --to "$TMP/a8.safetensors" --format meshtrain >/dev/null ||
  fail "export of step 8"

first_loss() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["loss"])' "$1"; }

# B: from the root (newest complete = step 8); C: from the exported file.
"$BIN" train "${ARGS[@]}" --set init_from="$TMP/a/ckpt" --set train.steps=4 --set checkpoint.every=4 \
  --set telemetry.dir="$TMP/b" >"$TMP/log_b" 2>&1 || { cat "$TMP/log_b"; fail "init_from a checkpoint root failed"; }
grep -q "loaded weights from .*step_00000008" "$TMP/log_b" || { cat "$TMP/log_b"; fail "B did not load step 8"; }
grep -q "resumed from" "$TMP/log_b" && fail "init_from must not resume the old run"
"$BIN" train "${ARGS[@]}" --set init_from="$TMP/a8.safetensors" --set train.steps=4 \
  --set telemetry.dir="$TMP/c" >"$TMP/log_c" 2>&1 || { cat "$TMP/log_c"; fail "init_from the exported file failed"; }
python3 - "$TMP/b/metrics.jsonl" "$TMP/c/metrics.jsonl" <<'PY' || fail "checkpoint dir and exported file train differently"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if l.strip()] for p in sys.argv[1:3])
assert a == b and len(a) == 4, (a, b)
PY
cmp -s "$TMP/b/model.safetensors" "$TMP/c/model.safetensors" || fail "final models differ"
# A fresh optimizer: B's own step-4 checkpoint counts 4 optimizer steps, not 12.
python3 -c 'import json,sys; x=json.load(open(sys.argv[1])); assert x["step"]==4 and x["optimizer_steps"]==4, (x["step"], x["optimizer_steps"])' \
  "$TMP/b/ckpt/step_00000004/index.json" || fail "optimizer state was carried over"

# D: a step directory (step 4), and R: random init; the trained weights start lower.
"$BIN" train "${ARGS[@]}" --set init_from="$TMP/a/ckpt/step_00000004" --set train.steps=1 \
  --set telemetry.dir="$TMP/d" >"$TMP/log_d" 2>&1 || { cat "$TMP/log_d"; fail "init_from a step dir failed"; }
grep -q "loaded weights from .*step_00000004" "$TMP/log_d" || fail "D did not load step 4"
"$BIN" train "${ARGS[@]}" --set model.preset=tiny --set train.steps=1 --set telemetry.dir="$TMP/r" \
  >"$TMP/log_r" 2>&1 || fail "random-init run failed"
python3 -c 'import sys; b, d, r = map(float, sys.argv[1:]); assert b < d < r, (b, d, r)' \
  "$(first_loss "$TMP/b/metrics.jsonl")" "$(first_loss "$TMP/d/metrics.jsonl")" "$(first_loss "$TMP/r/metrics.jsonl")" ||
  fail "losses do not show the loaded weights (step 8 < step 4 < random)"

# Errors: a root without a complete checkpoint; a model that does not match.
mkdir -p "$TMP/empty/step_00000003"
out=$("$BIN" train "${ARGS[@]}" --set init_from="$TMP/empty" --set train.steps=1 --set telemetry.dir="$TMP/e" 2>&1) &&
  fail "init_from an empty checkpoint root succeeded"
grep -q "holds no complete checkpoint" <<<"$out" || fail "unclear error for an empty root: $out"
out=$("$BIN" train "${ARGS[@]}" --set init_from="$TMP/a/ckpt" --set model.n_layer=3 --set train.steps=1 \
  --set telemetry.dir="$TMP/e" 2>&1) && fail "init_from a checkpoint of another shape succeeded"
grep -q "disagree with the model in init_from" <<<"$out" || fail "unclear error for a mismatched model: $out"
echo ok
