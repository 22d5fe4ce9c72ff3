#!/usr/bin/env bash
# `meshtrain ckpt`: import a model file as a step-0 checkpoint, inspect it,
# export it (hf and meshtrain) and import the export again bit-identically;
# a torn or corrupt checkpoint makes inspect fail naming the problem; wrong
# flags exit 2. (That PyTorch loads the hf export: ckpt_export_loads_in_torch.sh.)
set -uo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail
FIX="$SRC/tests/fixtures/gpt_tiny_hf.safetensors"

"$BIN" ckpt import "$FIX" --out "$TMP/a" --n-head 2 >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "import failed"; }
test -f "$TMP/a/step_00000000/index.json" || fail "no index after import"
grep -q step_00000000 "$TMP/a/latest" || fail "latest does not name step_00000000"

out=$("$BIN" ckpt inspect "$TMP/a" 2>&1) || { echo "$out"; fail "inspect of a good root failed"; }
echo "$out" | grep "complete" >/dev/null || fail "inspect does not say complete: $out"
out=$("$BIN" ckpt inspect "$TMP/a/step_00000000" 2>&1) || { echo "$out"; fail "inspect of a step dir failed"; }
for want in "h.1.mlp.c_proj.weight" "shard_0_of_1.safetensors" "crc32c" "mesh dp=1" "(64, 16)"; do
  echo "$out" | grep -F "$want" >/dev/null || fail "inspect output lacks '$want'"
done
"$BIN" ckpt inspect "$TMP/a" --json | python3 -c 'import json,sys; r=[json.loads(l) for l in sys.stdin]; assert r[0]["status"]=="complete" and r[0]["world_size"]==1, r' \
  || fail "inspect --json"

# export -> import -> export: the same bytes.
"$BIN" ckpt export "$TMP/a" --to "$TMP/hf1.safetensors" >/dev/null || fail "export hf"
"$BIN" ckpt import "$TMP/hf1.safetensors" --out "$TMP/b" >/dev/null || fail "import of the hf export"
"$BIN" ckpt export "$TMP/b" --to "$TMP/hf2.safetensors" >/dev/null || fail "export hf again"
cmp -s "$TMP/hf1.safetensors" "$TMP/hf2.safetensors" || fail "hf export -> import -> export changed bytes"
cmp -s "$TMP/a/step_00000000/shard_0_of_1.safetensors" "$TMP/b/step_00000000/shard_0_of_1.safetensors" \
  || fail "the re-imported checkpoint's shard differs"
"$BIN" ckpt export "$TMP/a/step_00000000" --to "$TMP/mt.safetensors" --format meshtrain >/dev/null || fail "export meshtrain"
"$BIN" ckpt import "$TMP/mt.safetensors" --out "$TMP/c" >/dev/null || fail "import of the meshtrain export"
cmp -s "$TMP/a/step_00000000/shard_0_of_1.safetensors" "$TMP/c/step_00000000/shard_0_of_1.safetensors" \
  || fail "meshtrain export -> import changed the parameters"

# A flipped byte: inspect fails and names the file and the checksum.
cp -r "$TMP/a" "$TMP/bad"
python3 - "$TMP/bad/step_00000000/shard_0_of_1.safetensors" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-100] ^= 0x04; open(p, "wb").write(b)
PY
out=$("$BIN" ckpt inspect "$TMP/bad" 2>&1) && fail "inspect of a corrupt checkpoint exited 0"
echo "$out" | grep "checksum mismatch" >/dev/null || fail "no checksum mismatch in: $out"
echo "$out" | grep "shard_0_of_1.safetensors" >/dev/null || fail "corrupt file not named in: $out"
"$BIN" ckpt export "$TMP/bad/step_00000000" --to "$TMP/x.safetensors" >/dev/null 2>&1 && fail "export of a corrupt checkpoint succeeded"

# No index: incomplete.
rm "$TMP/bad/step_00000000/index.json"
out=$("$BIN" ckpt inspect "$TMP/bad" 2>&1) && fail "inspect of a torn checkpoint exited 0"
echo "$out" | grep "incomplete" >/dev/null || fail "torn checkpoint not reported incomplete: $out"

# Usage errors exit 2.
"$BIN" ckpt export "$TMP/a" --to "$TMP/y.safetensors" --format bogus >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad --format should exit 2"
"$BIN" ckpt inspect >/dev/null 2>&1; [ $? -eq 2 ] || fail "inspect without a dir should exit 2"
"$BIN" ckpt frobnicate >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown ckpt subcommand should exit 2"
"$BIN" ckpt --help >/dev/null || fail "ckpt --help"
echo ok
