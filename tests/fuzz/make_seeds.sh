#!/usr/bin/env bash
# Regenerates the generated seeds in tests/fuzz/corpus/ with the product
# itself (the fixtures of each format are seeds too; tests/fuzz/CMakeLists.txt
# lists them). Findings saved by scripts/fuzz.sh sit beside these and are kept.
#   bash tests/fuzz/make_seeds.sh [build/bin/meshtrain]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/bin/meshtrain}
C=tests/fuzz/corpus
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p $C/token_shard $C/checkpoint_index $C/gpt_model_file $C/cluster $C/instruct_jsonl

# Token shards: ours (uint16, from `data synth`), llm.c's uint32 (version 7)
# and a masked instruction shard, each a few hundred tokens.
"$BIN" data synth --out "$TMP/synth" --tokens 3000 >/dev/null
cp "$TMP/synth/val_000000.bin" $C/token_shard/seed_synth_u16.bin
python3 - $C/token_shard <<'PY'
import struct, sys
out = sys.argv[1]
def header(*ints):
    h = list(ints) + [0] * (256 - len(ints))
    return struct.pack("<256i", *h)
toks = [(i * 7919) % 50000 for i in range(100)]
open(f"{out}/seed_llmc_u32.bin", "wb").write(header(20240801, 7, len(toks)) + struct.pack(f"<{len(toks)}I", *toks))
window = 16
toks = [(i * 31) % 300 for i in range(4 * window)]
mask = bytes((1 if (i % window) >= window // 2 else 0) for i in range(len(toks)))
open(f"{out}/seed_masked_u16.bin", "wb").write(header(20261125, 1, len(toks), 2, window) + struct.pack(f"<{len(toks)}H", *toks) + mask)
PY

# An llm.c model file (gpt2_124M.bin's layout, version 3 = f32) of a 1-layer model.
python3 - $C/gpt_model_file/seed_llmc_tiny.bin <<'PY'
import struct, sys
T, V, L, NH, C, Vp = 8, 10, 1, 2, 8, 64
n = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
h = [20240326, 3, T, V, L, NH, C, Vp] + [0] * 248
vals = [((i * 37) % 101 - 50) / 500.0 for i in range(n)]
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack(f"<{n}f", *vals))
PY

# A checkpoint index: one step of a tiny model on 2 ranks with ZeRO-1, so the
# index lists per-rank optimizer shards.
"$BIN" train --nproc 2 --set model.preset=tiny --set model.vocab_size=256 --set model.n_layer=1 \
  --set model.seq_len=16 --set data.train="$TMP/synth/train_*.bin" --set data.val="$TMP/synth/val_*.bin" \
  --set train.steps=1 --set train.micro_batch=1 --set train.eval_every=0 --set train.threads=1 \
  --set zero.stage=1 --set checkpoint.every=1 --set checkpoint.dir="$TMP/ckpt" \
  --set telemetry.dir="$TMP/run" --set telemetry.peak_gflops=1 >"$TMP/train.log" 2>&1 ||
  { cat "$TMP/train.log"; exit 1; }
step=$(ls -d "$TMP"/ckpt/step_* | tail -1)
sed "s|$TMP|/data/run|g" "$step/index.json" >$C/checkpoint_index/seed_zero1_2ranks.json
# The same model in our own safetensors format (the other two formats are
# the Hugging Face fixture and the llm.c file above).
"$BIN" ckpt export "$step" --to $C/gpt_model_file/seed_meshtrain_format.safetensors --format meshtrain >/dev/null
# Cluster files: what `plan --show-cluster` writes for two catalogue entries.
"$BIN" plan --show-cluster h100-sxm >$C/cluster/seed_h100_sxm.json
"$BIN" plan --show-cluster a100-40gb >$C/cluster/seed_a100_40gb.json

# Instruction data: both line shapes, a system message, and a multi-turn chat.
cat >$C/instruct_jsonl/seed_examples.jsonl <<'JSONL'
{"prompt": "Name a prime number.", "response": "Seven."}
{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}
{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}, {"role": "assistant", "content": "6"}]}
JSONL
ls -la $C/*
