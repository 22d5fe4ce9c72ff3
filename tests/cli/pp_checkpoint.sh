#!/usr/bin/env bash
# Checkpoints of a pipeline run are in the logical layout: a run at dp 1 x
# tp 2 x pp 2 (GPT, whose tied wte lives on the first and the last stage,
# and Llama) saves at step 3, and the checkpoint resumes at (dp, tp, pp) =
# (1, 2, 2), (2, 1, 2), (4, 1, 1) and (1, 1, 1) with the global batch kept
# at 16 sequences: steps 4-6 equal the uninterrupted run's within 1e-5
# (relative; other layouts add in other orders). A checkpoint written by one
# rank resumes on a pipeline too, and an async save works the same; an
# interleaved run's (chunks on one buffer) resumes at one rank and under
# zb-h1, and one rank's resumes interleaved.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, TMP (removed at exit), fail
source "$(dirname "$0")/lib/losses.sh"  # same_losses

"$BIN" data synth --out "$TMP/data" --tokens 40000 >/dev/null
run() {  # run NAME PRESET DP TP PP [ARGS...]: 6 steps of 16 sequences
  local name=$1 preset=$2 dp=$3 tp=$4 pp=$5
  shift 5
  "$BIN" train --set model.preset="$preset" --set model.n_layer=4 --set model.vocab_size=256 \
    --set model.seq_len=32 --set data.train="$TMP/data/train_*.bin" --set train.steps=6 \
    --set train.micro_batch=$((4 / dp)) --set train.grad_accum=4 --set train.lr=3e-3 \
    --set train.warmup=2 --set train.eval_every=0 --set train.threads=1 \
    --set parallel.tp="$tp" --set parallel.pp="$pp" --set telemetry.dir="$TMP/$name" \
    --nproc $((dp * tp * pp)) "$@" >"$TMP/$name.log" 2>&1 ||
    { grep -av '^[ {}]' "$TMP/$name.log" | tail -20; fail "train $name failed"; }
}
for preset in char-2L llama-tiny; do
  run "full_$preset" "$preset" 1 2 2 --set checkpoint.every=3 --set checkpoint.dir="$TMP/ck_$preset"
  [ -f "$TMP/ck_$preset/step_00000003/index.json" ] || fail "$preset: no checkpoint at step 3"
  for layout in "1 2 2" "2 1 2" "4 1 1" "1 1 1"; do
    set -- $layout
    name="from_dp$1_tp$2_pp$3_$preset"
    run "$name" "$preset" "$1" "$2" "$3" --set checkpoint.resume="$TMP/ck_$preset/step_00000003"
    grep -aq "resumed from .*step_00000003" "$TMP/$name.log" || fail "$name: did not resume"
    same_losses "$TMP/full_$preset/metrics.jsonl" "$TMP/$name/metrics.jsonl" 4 1e-5 6 >/dev/null ||
      fail "$name: steps 4-6 differ from the uninterrupted run"
  done
done

# An interleaved run's checkpoint (2 chunks per rank on one buffer) resumes
# at one rank and under zb-h1, and one rank's resumes interleaved.
run il char-2L 1 1 2 --set parallel.schedule=interleaved --set parallel.chunks=2 \
  --set checkpoint.every=3 --set checkpoint.dir="$TMP/ck_il"
for target in "one 1 1 1" "zb 1 1 2 --set parallel.schedule=zb-h1"; do
  set -- $target
  name="il_to_$1"
  shift
  run "$name" char-2L "$@" --set checkpoint.resume="$TMP/ck_il/step_00000003"
  same_losses "$TMP/il/metrics.jsonl" "$TMP/$name/metrics.jsonl" 4 1e-5 6 >/dev/null ||
    fail "$name: the interleaved run's checkpoint continued differently"
done

# One rank's checkpoint (async) resumes on a pipeline with tp.
run one char-2L 1 1 1 --set checkpoint.every=3 --set checkpoint.dir="$TMP/ck_one" --set checkpoint.async=true
run one_to_pp char-2L 1 2 2 --set checkpoint.resume="$TMP/ck_one/step_00000003"
same_losses "$TMP/one/metrics.jsonl" "$TMP/one_to_pp/metrics.jsonl" 4 1e-5 6 >/dev/null ||
  fail "one rank's checkpoint continued differently on tp 2 x pp 2"
run one_to_il char-2L 1 1 2 --set parallel.schedule=interleaved --set parallel.chunks=2 \
  --set checkpoint.resume="$TMP/ck_one/step_00000003"
same_losses "$TMP/one/metrics.jsonl" "$TMP/one_to_il/metrics.jsonl" 4 1e-5 6 >/dev/null ||
  fail "one rank's checkpoint continued differently interleaved"
echo "ok"
