#!/usr/bin/env bash
# Bad input to `meshtrain train` and `sample` gets a clear message and exit
# code (1 for bad data/config, 2 for bad usage), never a crash.
set -uo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

# expect CODE PATTERN -- command...
expect() {
  local code=$1 pattern=$2; shift 3
  "$@" >"$TMP/out" 2>&1
  local got=$?
  if [ "$got" -ne "$code" ]; then cat "$TMP/out"; fail "'$*' exited $got, expected $code"; fi
  grep -q -- "$pattern" "$TMP/out" || { cat "$TMP/out"; fail "'$*' output lacks '$pattern'"; }
  if grep -qiE "segmentation|core dumped|terminate called" "$TMP/out"; then fail "crash in '$*'"; fi
}

"$BIN" data synth --out "$TMP/data" --tokens 20000 >/dev/null
COMMON=(--set model.preset=tiny --set model.vocab_size=256 --set "data.train=$TMP/data/train_*.bin" --set train.steps=2
        --set "telemetry.dir=$TMP/run" --set train.threads=1 --set train.eval_every=0)

expect 2 "did you mean 'train.lr'" -- "$BIN" train "${COMMON[@]}" --set train.lrr=1
expect 2 "" -- "$BIN" train --no-such-flag
echo '{"train": {"steps": 3,}}' >"$TMP/bad.json"
expect 1 "bad.json" -- "$BIN" train --config "$TMP/bad.json"
echo '{"trian": {}}' >"$TMP/typo.json"
expect 1 "did you mean 'train'" -- "$BIN" train --config "$TMP/typo.json"
expect 1 "must be" -- "$BIN" train "${COMMON[@]}" --set train.micro_batch=0
# Optimizers: an unknown one lists those there are; Nesterov needs momentum.
expect 1 "adamw" -- "$BIN" train "${COMMON[@]}" --set train.optimizer=adagrad
expect 1 "train.nesterov" -- "$BIN" train "${COMMON[@]}" --set train.optimizer=sgd --set train.nesterov=true --set train.momentum=0
expect 1 "no token shards match" -- \
  "$BIN" train --set model.preset=tiny --set "data.train=$TMP/none_*.bin" --set "telemetry.dir=$TMP/run"

# Truncated and wrong-magic shards name the file and the problem.
cp "$TMP/data/train_000000.bin" "$TMP/trunc_000000.bin"
truncate -s 5000 "$TMP/trunc_000000.bin"
expect 1 "trunc_000000.bin" -- "$BIN" train --set model.preset=tiny \
  --set "data.train=$TMP/trunc_*.bin" --set "telemetry.dir=$TMP/run"
head -c 4096 /dev/urandom >"$TMP/junk_000000.bin"
expect 1 "junk_000000.bin" -- "$BIN" train --set model.preset=tiny \
  --set "data.train=$TMP/junk_*.bin" --set "telemetry.dir=$TMP/run"

# Tokens the model's vocabulary cannot hold.
expect 1 "outside the vocabulary" -- "$BIN" train "${COMMON[@]}" --set model.preset="" \
  --set model.n_layer=1 --set model.n_head=1 --set model.n_embd=8 --set model.seq_len=16 \
  --set model.vocab_size=40

# A model file whose shapes disagree with the config, and a context longer than the model's.
"$BIN" train "${COMMON[@]}" >/dev/null 2>&1 || fail "setup training failed"
expect 1 "disagree" -- "$BIN" train "${COMMON[@]}" --set model.preset="" \
  --set "init_from=$TMP/run/model.safetensors" --set model.seq_len=64
expect 1 "parallel.pp = 2 needs a multiple of 2 rank(s) but the job has 1" -- "$BIN" train "${COMMON[@]}" --set parallel.pp=2
# A device is named: a misspelt one, and a GPU where this build (CPU only) has no CUDA backend.
expect 1 'device must be "cpu", "cuda", "cuda:N" or "guarded" (the test device); got "gpu"' -- "$BIN" train "${COMMON[@]}" --set device=gpu
expect 1 "no runtime for device cuda:0 in this build" -- "$BIN" train "${COMMON[@]}" --set device=cuda
# What a device trains today: one rank, no LoRA (the guarded test device stands in for a GPU).
expect 1 "device = \"guarded\" with 2 ranks: collectives on device memory are not available yet" -- "$BIN" train "${COMMON[@]}" --set device=guarded --nproc 2
expect 1 "LoRA keeps its frozen base in host memory" -- "$BIN" train "${COMMON[@]}" --set device=guarded --set lora.rank=2
# A tp that does not divide the heads (tiny GPT: 2) is named.
expect 1 "parallel.tp = 3 must divide the model's n_head (2)" -- "$BIN" train "${COMMON[@]}" --set parallel.tp=3 --nproc 3
expect 1 "parallel.tp = 2 must divide the 1 rank(s)" -- "$BIN" train "${COMMON[@]}" --set model.preset=llama-tiny --set parallel.tp=2
# Every ZeRO stage reduces in bf16 (tests/unit/zero_bf16_grads_mp_test.cpp); a wire format
# that does not exist is named.
expect 1 "comm.grad_dtype must be one of f32, bf16" -- "$BIN" train "${COMMON[@]}" \
  --set comm.grad_dtype=f16 --set zero.stage=1
head -c 100 "$TMP/run/model.safetensors" >"$TMP/cut.safetensors"
expect 1 "cut.safetensors" -- "$BIN" sample --model "$TMP/cut.safetensors"
expect 1 "missing.safetensors" -- "$BIN" sample --model "$TMP/missing.safetensors"
expect 2 "" -- "$BIN" sample
echo "ok"
