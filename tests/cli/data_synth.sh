#!/usr/bin/env bash
# `meshtrain data synth` writes shards and entropy.json with the exact entropy.
set -euo pipefail
BIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$BIN" data synth --out "$TMP/synth" --tokens 50000 --seed 3 | tee "$TMP/log"
test -s "$TMP/synth/train_000000.bin" || { echo "FAIL: no train shard"; exit 1; }
test -s "$TMP/synth/val_000000.bin" || { echo "FAIL: no val shard"; exit 1; }
test -s "$TMP/synth/entropy.json" || { echo "FAIL: no entropy.json"; exit 1; }
grep -q '"entropy_nats_per_token": 1\.' "$TMP/synth/entropy.json" \
  || { echo "FAIL: entropy.json lacks a nats value in [1, 2)"; cat "$TMP/synth/entropy.json"; exit 1; }
grep -q '"entropy_bits_per_token"' "$TMP/synth/entropy.json" || { echo "FAIL: bits"; exit 1; }
grep -q "nats/token" "$TMP/log" || { echo "FAIL: entropy not printed"; exit 1; }
[ "$(stat -c %s "$TMP/synth/train_000000.bin")" -eq $((1024 + 2 * 50000)) ] \
  || { echo "FAIL: train shard size"; exit 1; }

# Same seed, same bytes.
"$BIN" data synth --out "$TMP/again" --tokens 50000 --seed 3 >/dev/null
cmp "$TMP/synth/train_000000.bin" "$TMP/again/train_000000.bin" || { echo "FAIL: not deterministic"; exit 1; }
echo PASS
