#!/usr/bin/env bash
# TensorBoard's own reader (tools/check_tensorboard_events.py) loads the
# events of a real training run, with every scalar family the run writes.
# Runs in PYTHON (lib/common.sh: scripts/test.sh's environment); without the
# tensorboard package there the test is reported as skipped (exit 77).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail, PYTHON
need_python_packages tensorboard
"$BIN" data synth --out "$TMP/data" --tokens 60000 >/dev/null
"$BIN" train --set model.preset=tiny --set model.vocab_size=256 \
  --set data.train="$TMP/data/train_*.bin" --set data.val="$TMP/data/val_*.bin" \
  --set train.steps=4 --set train.micro_batch=2 --set train.eval_every=2 --set train.eval_batches=2 \
  --set train.threads=1 --set telemetry.price_per_device_hour=2.5 --set telemetry.dir="$TMP/run" \
  --nproc 2 >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "train failed"; }
"$PYTHON" "$SRC/tools/check_tensorboard_events.py" "$TMP/run" --quiet \
  --expect train/loss val/loss time/step_ms throughput/mfu cost/usd_per_million_tokens \
  straggler/lag_ms || fail "TensorBoard could not read the events"
echo "ok"
