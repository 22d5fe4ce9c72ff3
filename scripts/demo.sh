#!/usr/bin/env bash
# The main job of the README: install, build, prepare English text from the
# `fortunes` package, train char-6L with a live progress display, then sample.
# Extra arguments are passed to `meshtrain train` (e.g. --set train.steps=200).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
BIN=build/bin/meshtrain
if [ ! -f data/fortunes/train_000000.bin ]; then
  $BIN data prepare --input /usr/share/games/fortunes --out data/fortunes --val-fraction 0.05
fi
$BIN train --config configs/char6l_fortunes.json "$@"
echo
echo "== sample from the trained model =="
$BIN sample --model runs/char6l_fortunes/model.safetensors --prompt "The " --tokens 400 \
  --temperature 0.8 --top-k 40
