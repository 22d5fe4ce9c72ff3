#!/usr/bin/env bash
# Damaged newest checkpoint, end to end through `meshtrain train`: a truncated
# shard, a missing shard, and a step directory holding another model's
# checkpoint are each skipped with a warning naming the file (or index) and
# the problem, the run resumes from the previous complete checkpoint (step 8)
# and ends with the uninterrupted run's model. (A flipped byte: train_resume.sh.)
# A directory of nothing but unusable checkpoints is an error, not a fresh start.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 40000 >/dev/null
ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set train.warmup=2 --set train.lr=3e-3 --set train.eval_every=0 --set train.threads=1
      --set train.micro_batch=4 --set checkpoint.every=4 --set checkpoint.keep_last=0)
"$BIN" train "${ARGS[@]}" --set train.steps=12 --set telemetry.dir="$TMP/ref" >"$TMP/log_ref" 2>&1 ||
  { cat "$TMP/log_ref"; fail "reference run failed"; }
"$BIN" train "${ARGS[@]}" --set train.steps=4 --set model.n_layer=1 --set telemetry.dir="$TMP/other" \
  >"$TMP/log_other" 2>&1 || { cat "$TMP/log_other"; fail "other-model run failed"; }

# Each case: a copy of the reference's checkpoints with step 12 damaged, then
# a 12-step run that must resume from step 8 and finish like the reference.
check() {
  local name=$1 want=$2 d="$TMP/$1"
  "$BIN" train "${ARGS[@]}" --set train.steps=12 --set telemetry.dir="$d" >"$d.log" 2>&1 ||
    { cat "$d.log"; fail "$name: run failed"; }
  grep -q "not resuming from .*step_00000012: .*$want" "$d.log" || { cat "$d.log"; fail "$name: no warning with '$want'"; }
  grep -q "resumed from .*step_00000008 at step 8" "$d.log" || { cat "$d.log"; fail "$name: no fallback to step 8"; }
  cmp -s "$d/model.safetensors" "$TMP/ref/model.safetensors" || fail "$name: final model differs"
  echo "$name: skipped ($want), resumed from step 8"
}
setup() { mkdir -p "$TMP/$1" && cp -r "$TMP/ref/ckpt" "$TMP/$1/ckpt" && echo "$TMP/$1/ckpt/step_00000012"; }

s=$(setup truncated)
truncate -s -100 "$s/shard_0_of_1.safetensors"
check truncated "shard_0_of_1.safetensors is [0-9]* bytes but the index records [0-9]* (truncated)"

s=$(setup missing)
rm "$s/shard_0_of_1.safetensors"
check missing "shard file .*shard_0_of_1.safetensors is missing"

s=$(setup other_model)
rm -r "$s" && cp -r "$TMP/other/ckpt/step_00000004" "$s"
check other_model "index.json is from another model: n_layer 1 (checkpoint) vs 2 (model)"
# Only checkpoints this run cannot resume (another model's): refused with
# the reasons instead of training from step 0 beside them; nothing removed.
mkdir -p "$TMP/only_other" && cp -r "$TMP/other/ckpt" "$TMP/only_other/ckpt"
if "$BIN" train "${ARGS[@]}" --set train.steps=12 --set telemetry.dir="$TMP/only_other" \
  >"$TMP/only_other.log" 2>&1; then fail "trained from step 0 beside another model's checkpoints"; fi
grep -q "holds 1 complete checkpoint(s) and this run can resume none of them" "$TMP/only_other.log" &&
  grep -q "step_00000004: .*from another model: n_layer 1" "$TMP/only_other.log" &&
  grep -q "checkpoint.resume = never" "$TMP/only_other.log" ||
  { cat "$TMP/only_other.log"; fail "no clear error for a directory of unusable checkpoints"; }
[ -d "$TMP/only_other/ckpt/step_00000004" ] || fail "the unusable checkpoint was removed"
"$BIN" train "${ARGS[@]}" --set train.steps=2 --set telemetry.dir="$TMP/only_other" \
  --set checkpoint.resume=never >"$TMP/never.log" 2>&1 || { cat "$TMP/never.log"; fail "resume=never refused"; }
echo ok
