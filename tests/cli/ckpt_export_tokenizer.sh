#!/usr/bin/env bash
# `meshtrain ckpt export --tokenizer`: the tokenizer files go beside the
# exported model (tokenizer.json, and tokenizer_config.json /
# special_tokens_map.json when they sit beside it), byte for byte; a path
# without a readable tokenizer.json is refused before anything is written.
set -uo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail
FIX="$SRC/tests/fixtures/gpt_tiny_hf.safetensors"
TOK="$SRC/tests/fixtures/tokenizers/gpt2_style"
"$BIN" ckpt import "$FIX" --out "$TMP/a" --n-head 2 >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "import failed"; }

# A tokenizer folder with a config beside tokenizer.json.
mkdir -p "$TMP/tok"
cp "$TOK/tokenizer.json" "$TMP/tok/"
echo '{"model_max_length": 16, "eos_token": "<|endoftext|>"}' >"$TMP/tok/tokenizer_config.json"
mkdir -p "$TMP/out"
"$BIN" ckpt export "$TMP/a" --to "$TMP/out/model.safetensors" --tokenizer "$TMP/tok" >"$TMP/log" 2>&1 \
  || { cat "$TMP/log"; fail "export with a tokenizer failed"; }
test -f "$TMP/out/model.safetensors" || fail "no model file"
cmp -s "$TMP/tok/tokenizer.json" "$TMP/out/tokenizer.json" || fail "tokenizer.json not copied as it is"
cmp -s "$TMP/tok/tokenizer_config.json" "$TMP/out/tokenizer_config.json" || fail "tokenizer_config.json not copied"
grep -q "tokenizer file $TMP/out/tokenizer.json" "$TMP/log" || { cat "$TMP/log"; fail "the copied files are not listed"; }

# No tokenizer.json there: a clear error, and no model file written.
out=$("$BIN" ckpt export "$TMP/a" --to "$TMP/out2/model.safetensors" --tokenizer "$TMP/nowhere" 2>&1) \
  && fail "export with a missing tokenizer succeeded"
echo "$out" | grep "nowhere" >/dev/null || fail "the error does not name the path: $out"
test ! -e "$TMP/out2/model.safetensors" || fail "a model file was written despite the error"
echo "PASS"
