#!/usr/bin/env bash
# The BPE path a user takes with a Hugging Face tokenizer.json: `tokenize`
# gives the reference library's ids (tests/fixtures/tokenizers/cases.json),
# `data prepare --tokenizer` writes shards that decode back to the text, a
# Llama model trains on them (loss falls), and bad input exits with a message.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail
TOK="$SRC/tests/fixtures/tokenizers/llama3_style/tokenizer.json"

# tokenize: the ids equal the library's for a multilingual case.
python3 - "$SRC/tests/fixtures/tokenizers/cases.json" >"$TMP/case" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["llama3_style"]["encode"]
case = next(e for e in c if e["text"].startswith("Emoji"))
print(case["text"])
print(" ".join(map(str, case["ids_special"])))
PY
text=$(sed -n 1p "$TMP/case")
want=$(sed -n 2p "$TMP/case")
"$BIN" tokenize --tokenizer "$TOK" --special "$text" >"$TMP/tok"
cat "$TMP/tok"
grep -qx "ids: $want" "$TMP/tok" || fail "tokenize ids differ from the library's: want '$want'"
grep -q "decode(encode(text)) == text: yes" "$TMP/tok" || fail "no round trip"
"$BIN" tokenize --tokenizer "$TOK" --ids "$(echo "$want" | tr ' ' ',')" | grep -F "<|begin_of_text|>$text" >/dev/null \
  || fail "decoding the ids does not give the text back"

# data prepare with the tokenizer, 2 threads; the shards decode to the text.
mkdir -p "$TMP/text"
for f in /usr/share/games/fortunes/{computers,science,wisdom}; do
  [ -f "$f" ] && cp "$f" "$TMP/text/" || true
done
[ -n "$(ls "$TMP/text")" ] || for i in $(seq 1 2000); do echo "line $i: the quick brown fox jumps over the lazy dog."; done >"$TMP/text/a.txt"
"$BIN" data prepare --input "$TMP/text" --out "$TMP/data" --tokenizer "$TOK" --threads 2 \
  --val-fraction 0.05 --doc-separator "<|end_of_text|>" >"$TMP/prep"
cat "$TMP/prep"
grep -q "tokenizer byte-level BPE, 900 tokens" "$TMP/prep" || fail "prepare did not name the tokenizer"
grep -q "2-byte tokens" "$TMP/prep" || fail "prepare did not report the shard width"
test -s "$TMP/data/tokenizer.json" || fail "the tokenizer was not copied beside the shards"
"$BIN" data inspect "$TMP/data/train_000000.bin" --show 30 --tokenizer "$TMP/data" >"$TMP/insp"
grep -q "<|end_of_text|>" "$TMP/insp" || { cat "$TMP/insp"; fail "inspect did not decode the separator"; }

# A small Llama trains on the BPE shards (vocabulary 900 >= the tokenizer's).
"$BIN" train --set model.preset=llama-tiny --set model.vocab_size=900 --set model.seq_len=16 \
  --set data.train="$TMP/data/train_*.bin" --set data.val="$TMP/data/val_*.bin" \
  --set train.steps=40 --set train.warmup=4 --set train.lr=1e-2 --set train.micro_batch=8 \
  --set train.eval_every=0 --set train.sample_every=0 --set telemetry.dir="$TMP/run" \
  --set train.threads=1 >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "train on BPE shards failed"; }
python3 - "$TMP/run/metrics.jsonl" <<'PY' || fail "loss did not fall"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first = sum(r["loss"] for r in rows[:5]) / 5
last = sum(r["loss"] for r in rows[-5:]) / 5
print(f"loss {first:.3f} -> {last:.3f}")
assert last < first - 0.3, (first, last)
PY

# Generate from the trained model with the tokenizer: greedy text is the same
# with the KV cache and with full recomputation; tokens/s goes to stderr.
test -s "$TMP/run/model.safetensors" || fail "no model file"
"$BIN" sample --model "$TMP/run/model.safetensors" --tokenizer "$TOK" --prompt "The" \
  --tokens 12 --temperature 0 --threads 1 >"$TMP/gen1" 2>"$TMP/gen1.err" || { cat "$TMP/gen1.err"; fail "sample failed"; }
"$BIN" generate --model "$TMP/run/model.safetensors" --tokenizer "$TOK" --prompt "The" \
  --tokens 12 --temperature 0 --threads 1 --no-kv-cache >"$TMP/gen2" 2>/dev/null
cat "$TMP/gen1" "$TMP/gen1.err"
cmp -s "$TMP/gen1" "$TMP/gen2" || fail "KV-cache generation differs from recomputation"
grep -q "generated 12 tokens after a 2-token prompt: .* tokens/s .*KV cache on" "$TMP/gen1.err" \
  || fail "no tokens/s line (the prompt is <|begin_of_text|> + 'The')"
set +e
"$BIN" sample --model "$TMP/run/model.safetensors" --prompt "x" --tokens 2 >/dev/null 2>"$TMP/err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "a 900-token model without a tokenizer exited $rc, expected 2"
grep -q "pass --tokenizer" "$TMP/err" || { cat "$TMP/err"; fail "no tokenizer hint"; }

# A model whose vocabulary is smaller than the tokenizer's: a clear error.
set +e
"$BIN" train --set model.preset=llama-tiny --set model.vocab_size=256 --set model.seq_len=16 \
  --set data.train="$TMP/data/train_*.bin" --set train.steps=2 --set train.eval_every=0 \
  --set train.sample_every=0 --set telemetry.dir="$TMP/run2" --set train.threads=1 >"$TMP/err" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "training a 256-token model on 900-token shards succeeded"
grep -q "outside the vocabulary" "$TMP/err" || { cat "$TMP/err"; fail "no vocabulary message"; }

# Bad tokenizer files: exit 1 with the reason.
echo '{"model": {"type": "Unigram", "vocab": []}}' >"$TMP/uni.json"
for bad in "$TMP/uni.json:model type 'Unigram' is not supported" "$TMP/nope.json:does not exist"; do
  set +e
  "$BIN" data prepare --input "$TMP/text" --out "$TMP/x" --tokenizer "${bad%%:*}" 2>"$TMP/err"
  rc=$?
  set -e
  [ "$rc" -eq 1 ] || fail "bad tokenizer ${bad%%:*} exited $rc"
  grep -q "${bad#*:}" "$TMP/err" || { cat "$TMP/err"; fail "message for ${bad%%:*}"; }
done
echo ok
