#!/usr/bin/env bash
# LoRA on pipeline stages: adapters (rank 4, every linear layer) on the
# Hugging Face llama-tiny fixture's frozen base, cut into 2 stages, each
# rank training its stage's adapters on its stage's layers of the base (read
# by slices from the fixture). GPipe, 1F1B and zb-h1, dp 2 x pp 2 with ZeRO-1
# and ZeRO-2, bf16 and full recompute, and GPT (a tied wte in the frozen
# base, held by both stages; interleaved, 2 chunks per rank, alone and at
# dp 2 with ZeRO-2): every step's loss and gradient norm equal the
# single-rank LoRA run's within 1e-5 (relative), each stage's memory equals
# its prediction, and the merged model file the run writes equals the
# single rank's within 5e-5. A checkpoint saved at pp 2 resumes at one rank
# and one rank's at pp 2 with the uninterrupted run's losses; the merged
# export of the pp checkpoint is the run's model file.
set -euo pipefail

source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail, write_token_shard
source "$(dirname "$0")/lib/losses.sh"  # same_losses

mkdir -p "$TMP/data"
write_token_shard "$TMP/data/train_000000.bin" 61 1
run() {  # run NAME [ARGS...]: the fixture under LoRA, 6 steps of 4 micro-batches
  local name=$1
  shift
  "$BIN" train --set init_from="$SRC/tests/fixtures/llama_tiny_hf" --set model.preset= \
    --set data.train="$TMP/data/train_*.bin" --set train.steps=6 --set train.micro_batch=2 \
    --set train.grad_accum=4 --set train.lr=1e-2 --set train.warmup=2 --set train.eval_every=0 \
    --set train.threads=1 --set lora.rank=4 --set lora.alpha=8 --set telemetry.dir="$TMP/$name" \
    "$@" >"$TMP/$name.log" 2>&1 || { grep -av '^[ {}]' "$TMP/$name.log" | tail -20; fail "train $name failed"; }
}
# Tolerances as pp_train.sh's: a stage boundary changes no arithmetic, but
# the data-parallel mean and tied gradients are added in another order than
# one rank's (~1e-7 relative per step), so losses and norms get 1e-5; six
# AdamW steps, whose normalized updates carry such roundings into every
# adapter, leave the merged weights within 5e-5 (the fp32 1F1B run on one
# replica is byte-identical).
same_run() {  # same_run REF NAME: losses, norms (1e-5) and merged model files (5e-5)
  same_losses "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" 1 1e-5 6 >/dev/null ||
    fail "$2: losses differ from $1"
  python3 - "$TMP/$1" "$TMP/$2" <<'PY' || fail "$2: norms or the merged model differ from $1"
import array, json, struct, sys
rows = lambda d: [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()]
for a, b in zip(rows(sys.argv[1]), rows(sys.argv[2])):
    assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * abs(a["grad_norm"]), (a["step"], a, b)
def load(p):
    b = open(p + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    out = {}
    for k, v in head.items():
        if k != "__metadata__":
            a = array.array("f")
            a.frombytes(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            out[k] = a
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
for k in a:
    assert max(abs(x - y) for x, y in zip(a[k], b[k])) <= 5e-5, k
PY
}
same_memory() {  # each stage's memory, every category, equals its prediction
  python3 - "$TMP/$1/memory.json" <<'PY' || fail "$1: a stage's memory differs from its prediction"
import json, sys
for r in json.load(open(sys.argv[1])):
    for c in ("parameters", "gradients", "optimizer", "activations", "workspace"):
        assert r["peak"][c] == r["predicted"][c], (r["rank"], c, r["peak"][c], r["predicted"][c])
PY
}

run one
run one4 --set train.micro_batch=4  # dp 2 reads 2 a replica
run one_bf16 --set precision=bf16 --set recompute=full
for case in "gpipe 1 0 fp32" "1f1b 1 0 fp32" "zb-h1 1 0 fp32" "1f1b 2 1 fp32" "zb-h1 2 2 fp32" \
  "1f1b 1 0 bf16"; do
  set -- $case  # schedule dp zero precision
  name="dp$2_pp2_$1_z$3_$4"
  ref=one
  [ "$2" = 1 ] || ref=one4
  extra=()
  [ "$4" = bf16 ] && ref=one_bf16 extra=(--set recompute=full)
  run "$name" --set parallel.pp=2 --set parallel.schedule="$1" --set zero.stage="$3" \
    --set precision="$4" "${extra[@]}" --nproc $((2 * $2))
  grep -aq "model: LoRA r4 alpha 8 on 14 matrices" "$TMP/$name.log" || fail "$name: not the whole model's 14 adapted matrices"
  grep -aq "^pipeline: 2 stages, schedule $1 over 4 micro-batch(es)" "$TMP/$name.log" || fail "$name: no pipeline"
  grep -aq "loaded the frozen base from .*this shard's slices" "$TMP/$name.log" ||
    fail "$name: the base was not read by slices"
  same_memory "$name"
  same_run "$ref" "$name"
done

# GPT: the frozen base's tied wte is on both stages (each loads it; no
# gradient to exchange); the seeded random base, built by each stage as the
# whole model builds it.
gpt=(--set init_from= --set model.preset=char-2L --set model.n_layer=4 --set model.vocab_size=61
     --set model.seq_len=32)
run gpt_one "${gpt[@]}"
run gpt_pp2 "${gpt[@]}" --set parallel.pp=2 --nproc 2
same_memory gpt_pp2
same_run gpt_one gpt_pp2
# Interleaved: 2 chunks per rank, each LoRA chunk on its own stage of the
# base; alone, and at dp 2 with ZeRO-2 against dp 2 with ZeRO-2 without
# stages (on this model two ranks' mean, taken in another order than one
# rank's sum, moves step 6's norm by 5.6e-5 with or without a pipeline: the
# lr of 1e-2 and AdamW's normalized steps on the adapters amplify it).
run gpt_dp2_z2 "${gpt[@]}" --set zero.stage=2 --nproc 2
il=(--set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.chunks=2)
run gpt_il "${gpt[@]}" "${il[@]}" --nproc 2
run gpt_il_dp2_z2 "${gpt[@]}" "${il[@]}" --set zero.stage=2 --nproc 4
for name in gpt_il gpt_il_dp2_z2; do
  grep -aq "^pipeline: 2 stages x 2 chunks, schedule interleaved" "$TMP/$name.log" || fail "$name: not interleaved"
  same_memory "$name"
done
same_run gpt_one gpt_il
same_run gpt_dp2_z2 gpt_il_dp2_z2

# Checkpoints: saved at pp 2 after step 3, resumed at one rank; saved at one
# rank, resumed at pp 2. Both continue the uninterrupted run (one).
ck=(--set checkpoint.every=3 --set checkpoint.async=false)
run ck_pp2 "${ck[@]}" --set checkpoint.dir="$TMP/ck_pp2" --set train.steps=3 --set parallel.pp=2 --nproc 2
run ck_pp2_to_one "${ck[@]}" --set checkpoint.dir="$TMP/ck_pp2"
grep -aq "resumed from .*step_00000003" "$TMP/ck_pp2_to_one.log" || fail "pp 2 -> 1: did not resume"
same_losses "$TMP/one/metrics.jsonl" "$TMP/ck_pp2_to_one/metrics.jsonl" 4 1e-5 6 >/dev/null ||
  fail "pp 2 -> 1 resume differs from the uninterrupted run"
run ck_one "${ck[@]}" --set checkpoint.dir="$TMP/ck_one" --set train.steps=3
run ck_one_to_pp2 "${ck[@]}" --set checkpoint.dir="$TMP/ck_one" --set parallel.pp=2 --nproc 2
grep -aq "resumed from .*step_00000003" "$TMP/ck_one_to_pp2.log" || fail "pp 1 -> 2: did not resume"
same_losses "$TMP/one/metrics.jsonl" "$TMP/ck_one_to_pp2/metrics.jsonl" 4 1e-5 6 >/dev/null ||
  fail "pp 1 -> 2 resume differs from the uninterrupted run"
# The merged export of a checkpoint written by pipeline stages is the
# model file that run wrote (run ck_pp2 again to step 6).
run ck_pp2_end "${ck[@]}" --set checkpoint.dir="$TMP/ck_pp2_end" --set parallel.pp=2 --nproc 2
"$BIN" ckpt export "$TMP/ck_pp2_end" --format meshtrain --to "$TMP/merged.safetensors" >"$TMP/export.log" 2>&1 ||
  { cat "$TMP/export.log"; fail "export of the pp 2 LoRA checkpoint failed"; }
cmp -s "$TMP/merged.safetensors" "$TMP/ck_pp2_end/model.safetensors" ||
  fail "the pp 2 run's model file is not its merged checkpoint"

echo "ok"
