#!/usr/bin/env bash
# The Hugging Face export of an imported checkpoint loads into a PyTorch
# GPT-2 (tools/check_export_in_torch.py), and into transformers'
# GPT2LMHeadModel with the same logits. Runs in PYTHON (lib/common.sh:
# scripts/test.sh's environment); without torch, transformers and safetensors
# there the test is reported as skipped (exit 77).
set -uo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail, PYTHON
need_python_packages torch safetensors transformers
"$BIN" ckpt import "$SRC/tests/fixtures/gpt_tiny_hf.safetensors" --out "$TMP/a" --n-head 2 >"$TMP/log" 2>&1 \
  || { cat "$TMP/log"; fail "import failed"; }
"$BIN" ckpt export "$TMP/a" --to "$TMP/hf.safetensors" >/dev/null || fail "export hf"
"$PYTHON" "$SRC/tools/check_export_in_torch.py" "$TMP/hf.safetensors" >"$TMP/check" 2>&1
grep -q "^ok.*transformers agrees" "$TMP/check" || { cat "$TMP/check"; fail "PyTorch or transformers could not load the hf export"; }
echo "ok"
