#!/usr/bin/env bash
# The main job of the README: install, build, prepare English text from the
# `fortunes` package, train char-4L data-parallel on 2 local ranks (one thread
# each) with a live progress display and a checkpoint every 100 steps, then
# sample. Extra arguments are passed to `meshtrain train` (e.g. --set
# train.steps=200); the demo starts fresh each time, and
# `--set checkpoint.resume=auto` continues an interrupted one instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# Only what the demo runs: the CLI (the test command builds the tests).
MESHTRAIN_BUILD_TARGETS=meshtrain_cli bash scripts/build.sh
BIN=build/bin/meshtrain
if [ ! -f data/fortunes/train_000000.bin ]; then
  $BIN data prepare --input /usr/share/games/fortunes --out data/fortunes --val-fraction 0.05
fi
$BIN train --config configs/char4l_fortunes.json --nproc 2 --set checkpoint.resume=never "$@"
echo
echo "== sample from the trained model =="
$BIN sample --model runs/char4l_fortunes/model.safetensors --prompt "The " --tokens 400 \
  --temperature 0.8 --top-k 40
