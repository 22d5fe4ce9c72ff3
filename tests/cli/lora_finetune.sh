#!/usr/bin/env bash
# LoRA fine-tuning end to end, as a user runs it: adapters (rank 4, every
# linear layer) on the Hugging Face llama-tiny fixture, trained on 2 ranks
# with ZeRO-3, bf16 and full recompute, checkpointed and resumed; the run's
# merged model file equals the merged export of its last checkpoint; the
# export differs from the base (training changed the function) while the
# base on disk is untouched; bad LoRA settings and a moved base are clear
# errors. transformers loads the exported folder and its tensors are the
# merged weights (tools/check_lora_export.py, in PYTHON: lib/common.sh; without
# torch and transformers there, skipped with exit 77).
set -uo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail, PYTHON
FIX="$SRC/tests/fixtures/llama_tiny_hf"
cp -r "$FIX" "$TMP/base"
BASE="$TMP/base"
sum_before=$(cat "$BASE"/*.safetensors | md5sum)
mkdir -p "$TMP/data"
write_token_shard "$TMP/data/train_000000.bin" 61 1
common=(--set init_from="$BASE" --set model.preset= --set data.train="$TMP/data/train_*.bin"
        --set train.micro_batch=2 --set train.eval_every=0 --set train.threads=1
        --set train.lr=1e-2 --set train.warmup=0
        --set lora.rank=4 --set lora.alpha=8 --set zero.stage=3 --set precision=bf16
        --set recompute=full --set checkpoint.dir="$TMP/ck" --set checkpoint.every=2
        --set checkpoint.async=false --set telemetry.dir="$TMP/run")
"$BIN" train "${common[@]}" --set train.steps=4 --nproc 2 >"$TMP/train" 2>&1 \
  || { cat "$TMP/train"; fail "LoRA training failed"; }
grep -q "model: LoRA r4 alpha 8 on 14 matrices" "$TMP/train" || { cat "$TMP/train"; fail "not the LoRA model"; }
grep -q "loaded the frozen base from $BASE" "$TMP/train" || fail "the base was not loaded"
grep -q "ZeRO stage 3" "$TMP/train" || fail "not ZeRO-3"
grep -q "LoRA: the frozen base holds" "$TMP/train" || fail "no LoRA memory line"

# Resume from step 4 to 6 (the adapters and their optimizer state).
"$BIN" train "${common[@]}" --set train.steps=6 --nproc 2 >"$TMP/train2" 2>&1 \
  || { cat "$TMP/train2"; fail "LoRA resume failed"; }
grep -q "resumed from .*step_00000004" "$TMP/train2" || { cat "$TMP/train2"; fail "did not resume"; }

# The run's model file (merged) equals the merged export of the step-6 checkpoint.
"$BIN" ckpt export "$TMP/ck" --format meshtrain --to "$TMP/merged.safetensors" >"$TMP/log" 2>&1 \
  || { cat "$TMP/log"; fail "export of the LoRA checkpoint failed"; }
cmp -s "$TMP/merged.safetensors" "$TMP/run/model.safetensors" \
  || fail "the run's model file is not the merged checkpoint"
"$BIN" ckpt export "$TMP/ck" --to "$TMP/hf" >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "hf export failed"; }
test -s "$TMP/hf/config.json" || fail "the hf export wrote no config.json"
"$BIN" ckpt export "$BASE" --to "$TMP/base_again" >/dev/null 2>&1  # (not a checkpoint: expected to fail)
"$BIN" ckpt import "$BASE" --out "$TMP/base_ck" >/dev/null 2>&1 || fail "import of the base"
"$BIN" ckpt export "$TMP/base_ck" --format meshtrain --to "$TMP/base.safetensors" >/dev/null 2>&1 || fail "base export"
cmp -s "$TMP/base.safetensors" "$TMP/merged.safetensors" && fail "the merged model equals the base: LoRA changed nothing"
[ "$(cat "$BASE"/*.safetensors | md5sum)" = "$sum_before" ] || fail "training wrote to the base's files"

# The frozen base held in bf16 only (lora.base_dtype = bf16): its f32
# matrices are released, the allocator's parameter peak is the prediction and
# below the run that kept them, and the run's model file is again the export
# of its last checkpoint (the export merges into the same 16-bit values).
"$BIN" train "${common[@]}" --set lora.base_dtype=bf16 --set checkpoint.dir="$TMP/ck16" \
  --set telemetry.dir="$TMP/run16" --set train.steps=2 --nproc 2 >"$TMP/train16" 2>&1 \
  || { cat "$TMP/train16"; fail "LoRA with a bf16 base failed"; }
grep -q "frozen base's matrices are held in bf16 only" "$TMP/train16" || { cat "$TMP/train16"; fail "no bf16-base line"; }
python3 - "$TMP/run16/memory.json" "$TMP/run/memory.json" <<'PY' || fail "the bf16 base's memory is wrong"
import json, sys
half, kept = (json.load(open(p))[0] for p in sys.argv[1:])
assert half["peak"]["parameters"] == half["predicted"]["parameters"], half
assert half["peak"]["parameters"] < kept["peak"]["parameters"], (half, kept)
PY
"$BIN" ckpt export "$TMP/ck16" --format meshtrain --to "$TMP/merged16.safetensors" >"$TMP/log" 2>&1 \
  || { cat "$TMP/log"; fail "export of the bf16-base checkpoint failed"; }
cmp -s "$TMP/merged16.safetensors" "$TMP/run16/model.safetensors" \
  || fail "the bf16-base run's model file is not the merged export of its checkpoint"
# How the base is held changes no trained state: the bf16-base run resumes with an f32 base.
"$BIN" train "${common[@]}" --set checkpoint.dir="$TMP/ck16" --set telemetry.dir="$TMP/run16b" \
  --set train.steps=3 --nproc 2 >"$TMP/train16b" 2>&1 || { cat "$TMP/train16b"; fail "resuming with the f32 base failed"; }
grep -q "resumed from .*step_00000002" "$TMP/train16b" || { cat "$TMP/train16b"; fail "did not resume the bf16-base run"; }
"$BIN" train "${common[@]}" --set lora.base_dtype=bf16 --set precision=fp32 --set train.steps=1 \
  --set checkpoint.resume=never >"$TMP/err" 2>&1 && fail "a bf16 base in an fp32 run was accepted"
grep -q 'lora.base_dtype.*needs precision = "bf16"' "$TMP/err" || { cat "$TMP/err"; fail "unclear base_dtype error"; }

# Clear errors: a target that names nothing, LoRA with tensor parallelism,
# an export whose base moved.
"$BIN" train "${common[@]}" --set lora.targets=qq_proj --set train.steps=1 \
  --set checkpoint.resume=never >"$TMP/err" 2>&1 && fail "a bad lora.targets was accepted"
grep -q "lora.targets = qq_proj: no matrix of the llama model matches" "$TMP/err" || { grep -v "^ " "$TMP/err"; fail "unclear target error"; }
"$BIN" train "${common[@]}" --set parallel.tp=2 --set train.steps=1 --nproc 2 \
  --set checkpoint.resume=never >"$TMP/err" 2>&1 && fail "LoRA with tp was accepted"
grep -q "LoRA with tensor parallelism" "$TMP/err" || { cat "$TMP/err"; fail "unclear tp error"; }
mv "$BASE" "$TMP/moved"
"$BIN" ckpt export "$TMP/ck" --to "$TMP/hf2" >"$TMP/err" 2>&1 && fail "export without the base succeeded"
grep -q "pass the base's current place with --base" "$TMP/err" || { cat "$TMP/err"; fail "unclear moved-base error"; }
"$BIN" ckpt export "$TMP/ck" --format meshtrain --base "$TMP/moved" --to "$TMP/merged2.safetensors" >/dev/null 2>&1 \
  || fail "export with --base failed"
cmp -s "$TMP/merged.safetensors" "$TMP/merged2.safetensors" || fail "--base gave another merge"

need_python_packages torch transformers safetensors
"$PYTHON" "$SRC/tools/check_lora_export.py" "$TMP/hf" "$TMP/merged.safetensors" \
  || fail "transformers could not load the LoRA export or its weights are not the merged ones"
echo "ok"
