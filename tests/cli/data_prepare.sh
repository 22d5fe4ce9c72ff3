#!/usr/bin/env bash
# `meshtrain data prepare` on a folder of text files writes train/val shards
# that hold all of the text; a missing input exits 1 with a message.
set -euo pipefail
BIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

mkdir -p "$TMP/text/sub"
for i in $(seq 1 300); do echo "line $i of the first file, with some words"; done >"$TMP/text/a.txt"
for i in $(seq 1 300); do echo "line $i of the second file"; done >"$TMP/text/sub/b.txt"
printf '\000\001\002\003' >"$TMP/text/index.dat"  # binary: skipped

"$BIN" data prepare --input "$TMP/text" --out "$TMP/out" --val-fraction 0.1 --chunk-bytes 1024 \
  >"$TMP/log"
cat "$TMP/log"
test -s "$TMP/out/train_000000.bin" || { echo "FAIL: no train shard"; exit 1; }
test -s "$TMP/out/val_000000.bin" || { echo "FAIL: no val shard"; exit 1; }
grep -q "read   2 text file" "$TMP/log" || { echo "FAIL: expected 2 files read"; exit 1; }

# Header size + 2 bytes per token: the shards together hold exactly the input bytes.
input_bytes=$(cat "$TMP/text/a.txt" "$TMP/text/sub/b.txt" | wc -c)
shard_bytes=$(( $(stat -c %s "$TMP/out/train_000000.bin") + $(stat -c %s "$TMP/out/val_000000.bin") ))
if [ $(( (shard_bytes - 2048) / 2 )) -ne "$input_bytes" ]; then
  echo "FAIL: shards hold $(( (shard_bytes - 2048) / 2 )) tokens, input has $input_bytes bytes"
  exit 1
fi
"$BIN" data inspect "$TMP/out/val_000000.bin" --show 20 | grep "version 1" >/dev/null \
  || { echo "FAIL: inspect"; exit 1; }

# A missing path: exit status 1 and a message naming it.
set +e
"$BIN" data prepare --input "$TMP/does-not-exist" --out "$TMP/out2" 2>"$TMP/err"
rc=$?
set -e
cat "$TMP/err"
[ "$rc" -eq 1 ] || { echo "FAIL: missing input exited $rc, expected 1"; exit 1; }
grep -q "does-not-exist.*does not exist" "$TMP/err" || { echo "FAIL: message"; exit 1; }

# An empty folder: exit 1.
mkdir "$TMP/empty"
set +e
"$BIN" data prepare --input "$TMP/empty" --out "$TMP/out3" 2>"$TMP/err"
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "FAIL: empty input exited $rc, expected 1"; exit 1; }
grep -q "no text" "$TMP/err" || { echo "FAIL: empty-input message"; cat "$TMP/err"; exit 1; }
echo PASS
