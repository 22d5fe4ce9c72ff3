#!/usr/bin/env bash
# The Hugging Face export of an imported checkpoint loads into a PyTorch
# GPT-2 (tools/check_export_in_torch.py). Needs python3 with torch and
# safetensors: without them the test is reported as skipped (exit 77).
set -uo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail
if ! python3 -c "import torch, safetensors" 2>/dev/null; then
  echo "skipped: python3 cannot import torch and safetensors (pip install torch safetensors)"
  exit 77
fi
"$BIN" ckpt import "$SRC/tests/fixtures/gpt_tiny_hf.safetensors" --out "$TMP/a" --n-head 2 >"$TMP/log" 2>&1 \
  || { cat "$TMP/log"; fail "import failed"; }
"$BIN" ckpt export "$TMP/a" --to "$TMP/hf.safetensors" >/dev/null || fail "export hf"
python3 "$SRC/tools/check_export_in_torch.py" "$TMP/hf.safetensors" | grep -q "^ok" \
  || fail "PyTorch could not load the hf export"
echo "ok"
