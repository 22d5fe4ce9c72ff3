#!/usr/bin/env bash
# `train --set device=...` end to end on the guarded test device (host memory
# that only kernels may touch: any host read or write of the model's memory
# outside a kernel or the device runtime dies with SIGSEGV), standing in for a
# GPU on machines without one. The same run on the CPU and on the device gives
# bitwise the same losses, validation losses, gradient norms, samples and
# final model (the guarded device runs the CPU kernels), for GPT in fp32 and
# fp16 (an injected overflow skipped alike) and Llama in bf16; recompute on the
# device equals no recompute; checkpoints written on one resume on the other
# and continue exactly (synchronous and asynchronous saves), and init_from
# loads onto the device; the device allocator's per-category peaks equal the
# memory formulas.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail
source "$(dirname "$0")/lib/losses.sh"  # same_losses

"$BIN" data synth --out "$TMP/data" --tokens 30000 >/dev/null
# train NAME DEVICE [--set ...]: 4 steps of the tiny model with accumulation,
# evaluation and a sample; the run's log in $TMP/NAME.log, its files in $TMP/NAME.
train() {
  local name=$1 dev=$2
  shift 2
  "$BIN" train --set model.preset=tiny --set model.vocab_size=256 \
    --set data.train="$TMP/data/train_*.bin" --set data.val="$TMP/data/val_*.bin" \
    --set train.steps=4 --set train.micro_batch=2 --set train.grad_accum=2 --set train.warmup=2 \
    --set train.lr=3e-3 --set train.eval_every=2 --set train.eval_batches=2 --set train.threads=1 \
    --set train.sample_every=4 --set device="$dev" --set telemetry.dir="$TMP/$name" "$@" \
    >"$TMP/$name.log" 2>&1 || { grep -av "^[ {}]" "$TMP/$name.log" | tail -20; fail "train $name on $dev failed"; }
}
# same_run A B: equal metrics (loss, val_loss, grad_norm, loss scale), samples and model bytes.
same_run() {
  python3 - "$TMP/$1" "$TMP/$2" <<'PY' || fail "$1 and $2 differ"
import json, sys
rows = lambda d: [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert len(a) == len(b) == 4, (len(a), len(b))
for ra, rb in zip(a, b):
    # JSON floats round-trip, so equal values mean bitwise-equal f32 losses.
    for k in ("loss", "val_loss", "grad_norm", "loss_scale"):
        assert ra.get(k) == rb.get(k), (ra["step"], k, ra.get(k), rb.get(k))
PY
  diff <(grep -a "| sample:" "$TMP/$1.log") <(grep -a "| sample:" "$TMP/$2.log") >/dev/null ||
    fail "$1 and $2 sampled different text"
  grep -aq "| sample:" "$TMP/$1.log" || fail "$1 printed no sample"
  cmp -s "$TMP/$1/model.safetensors" "$TMP/$2/model.safetensors" || fail "$1 and $2: final models differ"
}
# memory_as_predicted NAME: every predicted category's peak was measured exactly.
memory_as_predicted() {
  python3 - "$TMP/$1/memory.json" <<'PY' || fail "$1: device memory differs from the prediction"
import json, sys
m = json.load(open(sys.argv[1]))[0]
for c in ("parameters", "gradients", "optimizer", "activations", "workspace"):
    assert m["peak"][c] == m["predicted"][c], (c, m["peak"][c], m["predicted"][c])
assert m["peak"]["parameters"] > 0, m
PY
}

# GPT, fp32.
train cpu cpu
train dev guarded
grep -q "^device: guarded | host memory that only kernels may touch" "$TMP/dev.log" ||
  fail "the run does not say where it trains"
grep -q "memory (measured): guarded allocator peak" "$TMP/dev.log" ||
  fail "the memory report is not the device's"
same_run cpu dev
memory_as_predicted dev
# Recompute on the device: bitwise the same as without.
train dev_full guarded --set recompute=full
same_run dev dev_full

# The other optimizers' kernels on the device (table ops): the CPU's bits,
# and their state's memory (SGD's one momentum, LAMB's two moments) as predicted.
train sgd_cpu cpu --set train.optimizer=sgd --set train.nesterov=true --set train.lr=0.1
train sgd_dev guarded --set train.optimizer=sgd --set train.nesterov=true --set train.lr=0.1
same_run sgd_cpu sgd_dev
memory_as_predicted sgd_dev
train lamb_cpu cpu --set train.optimizer=lamb --set train.lr=0.05
train lamb_dev guarded --set train.optimizer=lamb --set train.lr=0.05
same_run lamb_cpu lamb_dev
memory_as_predicted lamb_dev

# Llama, bf16 (the 16-bit copy and the rotary angles on the device).
train llama_cpu cpu --set model.preset=llama-tiny --set precision=bf16
train llama_dev guarded --set model.preset=llama-tiny --set precision=bf16
same_run llama_cpu llama_dev
memory_as_predicted llama_dev

# fp16 with an overflow injected at step 2 (written into the device's
# gradients): both skip it and lower the loss scale alike.
MESHTRAIN_TEST_INJECT_INF=1 train fp16_cpu cpu --set precision=fp16
MESHTRAIN_TEST_INJECT_INF=1 train fp16_dev guarded --set precision=fp16
same_run fp16_cpu fp16_dev
grep -q "overflow" "$TMP/fp16_dev.log" || fail "fp16 on the device: the injected overflow was not reported"

# Checkpoints: each run saves at steps 2 and 4 (the device's synchronously,
# the CPU's in the background); the other continues from its step 2 to the
# uninterrupted run's steps 3-4 and final model.
train ck_dev guarded --set checkpoint.dir="$TMP/ck_dev/ckpt" --set checkpoint.every=2 \
  --set checkpoint.async=false
train ck_cpu cpu --set checkpoint.dir="$TMP/ck_cpu/ckpt" --set checkpoint.every=2
same_run cpu ck_dev
same_run cpu ck_cpu
train from_dev cpu --set checkpoint.resume="$TMP/ck_dev/ckpt/step_00000002"
train from_cpu guarded --set checkpoint.resume="$TMP/ck_cpu/ckpt/step_00000002"
for run in from_dev from_cpu; do
  grep -aq "resumed from .*step_00000002 at step 2" "$TMP/$run.log" || fail "$run did not resume at step 2"
  same_losses "$TMP/cpu/metrics.jsonl" "$TMP/$run/metrics.jsonl" 3 0 4 || fail "$run: steps 3-4 differ"
  cmp -s "$TMP/cpu/model.safetensors" "$TMP/$run/model.safetensors" || fail "$run: final model differs"
done

# init_from a model file, loaded onto the device.
train init_cpu cpu --set init_from="$TMP/cpu/model.safetensors"
train init_dev guarded --set init_from="$TMP/cpu/model.safetensors"
same_run init_cpu init_dev
echo "ok"
