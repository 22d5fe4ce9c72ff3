#!/usr/bin/env bash
# What the gradient-sync strategies keep between steps is checkpointed, so a
# run stopped after step 8 and resumed ends bitwise equal to the
# uninterrupted one (deterministic mode, 2 ranks):
#  - local SGD / DiLoCo (H = 2, Nesterov outer momentum, AdamW inside): the
#    outer momentum and each rank's own inner AdamW moments (they differ
#    between ranks; a checkpoint of one rank's, or of a mix, diverges);
#  - top-k compression with error feedback after 3 uncompressed steps: each
#    rank's residual and the step count the warmup reads;
#  - PowerSGD rank 2: the residuals and the warm-start Q.
# Then the local-SGD checkpoint resumed on 3 ranks: each rank continues from
# rank r mod 2's inner state, and the run says so.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 40000 >/dev/null
BASE=(--set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set train.steps=12 --set train.warmup=2 --set train.lr=3e-3 --set train.eval_every=0
      --set train.threads=1 --set train.micro_batch=2 --set deterministic=true
      --set checkpoint.every=4 --set checkpoint.keep_last=0)
LOCAL=(--set parallel.local_sgd.sync_every=2 --set parallel.local_sgd.outer_lr=0.7
       --set parallel.local_sgd.outer_momentum=0.9 --set parallel.local_sgd.nesterov=true)
TOPK=(--set comm.compression.type=topk --set comm.compression.ratio=0.05
      --set comm.compression.warmup_steps=3)
POWER=(--set comm.compression.type=powersgd --set comm.compression.rank=2)

# case NAME ARGS...: uninterrupted vs stopped after step 8 and resumed.
case_() {
  local name=$1; shift
  "$BIN" train "${BASE[@]}" "$@" --nproc 2 --set telemetry.dir="$TMP/${name}_ref" \
    >"$TMP/log_${name}_ref" 2>&1 || { cat "$TMP/log_${name}_ref"; fail "$name: reference run failed"; }
  rc=0
  MESHTRAIN_TEST_CRASH_AFTER_STEP=8 "$BIN" train "${BASE[@]}" "$@" --nproc 2 \
    --set telemetry.dir="$TMP/$name" >"$TMP/log_${name}_1" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] || fail "$name: the interrupted run should fail"
  "$BIN" train "${BASE[@]}" "$@" --nproc 2 --set telemetry.dir="$TMP/$name" --set checkpoint.resume=auto \
    >"$TMP/log_${name}_2" 2>&1 || { cat "$TMP/log_${name}_2"; fail "$name: resume failed"; }
  grep "resumed from .*step_00000008 at step 8" "$TMP/log_${name}_2" >/dev/null ||
    { cat "$TMP/log_${name}_2"; fail "$name: did not resume at step 8"; }
  cmp -s "$TMP/$name/model.safetensors" "$TMP/${name}_ref/model.safetensors" ||
    fail "$name: the resumed run's model differs from the uninterrupted run's"
}

case_ local "${LOCAL[@]}"
python3 - "$TMP/local/ckpt/step_00000008/index.json" <<'PY' || fail "local: inner state not saved per rank"
import json, sys
index = json.load(open(sys.argv[1]))
sizes = {b["name"]: b["numel"] for b in index["buffers"]}
assert sizes["exp_avg"] == 2 * sizes["params"], sizes            # each rank's moments
assert sizes["sync.outer_momentum"] == sizes["params"], sizes    # the same on both ranks
PY
case_ topk "${TOPK[@]}"
case_ power "${POWER[@]}"

# Another world size: the inner state of rank r mod 2, said aloud.
"$BIN" train "${BASE[@]}" "${LOCAL[@]}" --set train.micro_batch=1 --nproc 3 \
  --set telemetry.dir="$TMP/three" --set checkpoint.resume="$TMP/local/ckpt/step_00000008" \
  >"$TMP/log_three" 2>&1 || { cat "$TMP/log_three"; fail "local: resume on 3 ranks failed"; }
grep "'exp_avg' holds the state of 2 rank(s) and this run has 3" "$TMP/log_three" >/dev/null ||
  { cat "$TMP/log_three"; fail "local on 3 ranks: the per-rank state's origin was not reported"; }
echo ok
