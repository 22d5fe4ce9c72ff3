#!/usr/bin/env bash
# A Hugging Face Llama directory (the llama-tiny fixture) imports as a step-0
# checkpoint, trains from there on 2 ranks with ZeRO-3 (init_from the
# directory), and exports back with `ckpt export --format hf`: importing the
# export gives the same checkpoint bytes, the run's own model file is
# init_from and importable too, and transformers loads the
# export and reproduces the reference logits (tools/check_llama_export.py;
# that part runs in PYTHON, lib/common.sh, and is skipped, with exit 77,
# without torch and transformers there).
set -uo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail, PYTHON
FIX="$SRC/tests/fixtures/llama_tiny_hf"

"$BIN" ckpt import "$FIX" --out "$TMP/ck" >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "import failed"; }
"$BIN" ckpt inspect "$TMP/ck" | grep "Llama L2 H4 KV2 C16" >/dev/null || fail "inspect does not describe the llama"
"$BIN" ckpt export "$TMP/ck" --to "$TMP/hf" >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "export hf failed"; }
test -s "$TMP/hf/config.json" || fail "export wrote no config.json"
"$BIN" ckpt import "$TMP/hf" --out "$TMP/ck2" >/dev/null 2>&1 || fail "import of the export failed"
cmp -s "$TMP/ck/step_00000000/shard_0_of_1.safetensors" "$TMP/ck2/step_00000000/shard_0_of_1.safetensors" \
  || fail "import -> export -> import changed the weights"

# Fine-tune from the Hugging Face directory, data-parallel with ZeRO-3, on a
# token shard within its 61-token vocabulary (llm.c format, written here).
mkdir -p "$TMP/data"
write_token_shard "$TMP/data/train_000000.bin" 61 1
"$BIN" train --set init_from="$FIX" --set model.preset= --set data.train="$TMP/data/train_*.bin" \
  --set train.steps=3 --set train.micro_batch=2 --set train.eval_every=0 --set train.threads=1 \
  --set zero.stage=3 --set checkpoint.dir="$TMP/ft" --set checkpoint.every=3 \
  --set checkpoint.async=false --set telemetry.dir="$TMP/run" --nproc 2 >"$TMP/train" 2>&1 \
  || { cat "$TMP/train"; fail "fine-tuning from the Hugging Face directory failed"; }
grep -q "loaded weights from $FIX" "$TMP/train" || { cat "$TMP/train"; fail "did not start from the fixture"; }
grep -q "ZeRO stage 3" "$TMP/train" || fail "not ZeRO-3"
"$BIN" ckpt export "$TMP/ft" --to "$TMP/ft_hf" >/dev/null 2>&1 || fail "export of the fine-tuned checkpoint"
cmp -s "$TMP/hf/model.safetensors" "$TMP/ft_hf/model.safetensors" && fail "fine-tuning changed nothing"

# The model file the run wrote (meshtrain's own format for any family) is
# init_from and ckpt import too.
"$BIN" ckpt import "$TMP/run/model.safetensors" --out "$TMP/ck3" >/dev/null 2>&1 || fail "import of the run's model file"
"$BIN" ckpt inspect "$TMP/ck3" | grep "Llama L2 H4 KV2 C16" >/dev/null || fail "the run's model file is not the llama"
"$BIN" train --set init_from="$TMP/run/model.safetensors" --set model.preset= \
  --set data.train="$TMP/data/train_*.bin" --set train.steps=1 --set train.micro_batch=2 \
  --set train.eval_every=0 --set train.threads=1 --set telemetry.dir="$TMP/run2" >"$TMP/train2" 2>&1 \
  || { cat "$TMP/train2"; fail "init_from the run's model file failed"; }
grep -q "model: Llama" "$TMP/train2" || fail "init_from the model file did not build the llama"

need_python_packages torch transformers safetensors
"$PYTHON" "$SRC/tools/check_llama_export.py" "$TMP/hf" "$SRC/tests/fixtures/llama_tiny_reference.safetensors" \
  || fail "transformers could not load the export or reproduce the logits"
echo "ok"
