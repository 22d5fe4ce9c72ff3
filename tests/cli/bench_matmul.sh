#!/usr/bin/env bash
# `meshtrain bench matmul` runs every algorithm on odd shapes over the shm
# transport and, where mpirun exists, over MPI; each run checks its sampled
# error itself (exit 1 above the bound) and the JSON says error_ok. The
# batched mode runs; bad flags are clear errors.
set -euo pipefail
BIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

run() {  # name, args...
  local name=$1; shift
  "$BIN" bench matmul --json --iters 1 -w 0 "$@" > "$TMP/$name" 2>&1 || { cat "$TMP/$name"; echo "FAIL: $name"; exit 1; }
  grep -q '"error_ok":true' "$TMP/$name" || { cat "$TMP/$name"; echo "FAIL: $name: error_ok is not true"; exit 1; }
}
run summa   -n 4 --algo summa --m 131 --n 97 --k 75 --nb 16 --grid 2x2
run summa1  -n 3 --algo summa --m 64 --n 40 --k 33 --nb 8 --grid 1x3 --dtype f32
run cannon  -n 4 --algo cannon --m 90 --n 77 --k 61 --dtype bf16
run oned    -n 3 --algo 1d --m 200 --n 30 --k 50
run splitk  -n 2 --algo splitk --m 30 --n 20 --k 500 --panel 4
run twohalf -n 2 --algo 2.5d --m 60 --n 50 --k 70 --grid 1x1x2
run auto    -n 2 --m 100 --n 100 --k 100
"$BIN" bench matmul -n 2 --m 100 --n 100 --k 100 --explain --iters 1 > "$TMP/explain" 2>&1 || { cat "$TMP/explain"; echo "FAIL: explain"; exit 1; }
grep -q "^# chose" "$TMP/explain" || { cat "$TMP/explain"; echo "FAIL: --explain prints no choice"; exit 1; }
"$BIN" bench matmul -n 2 --batch 200 --m 16 --n 16 --k 16 --dtype f32 --iters 1 --json > "$TMP/batch" 2>&1 || { cat "$TMP/batch"; echo "FAIL: batch"; exit 1; }
grep -q '"bench":"matmul-batched"' "$TMP/batch" || { cat "$TMP/batch"; echo "FAIL: batch output"; exit 1; }

if command -v mpirun > /dev/null; then
  MESHTRAIN_COMM_TRANSPORT=mpi timeout 120 mpirun --allow-run-as-root --oversubscribe -n 4 \
    "$BIN" bench matmul --json --iters 1 -w 0 --algo summa --m 70 --n 50 --k 45 --nb 8 --grid 2x2 > "$TMP/mpi" 2>&1 \
    || { cat "$TMP/mpi"; echo "FAIL: summa over MPI"; exit 1; }
  grep -q '"error_ok":true' "$TMP/mpi" || { cat "$TMP/mpi"; echo "FAIL: MPI run error"; exit 1; }
  MESHTRAIN_COMM_TRANSPORT=mpi timeout 120 mpirun --allow-run-as-root --oversubscribe -n 4 \
    "$BIN" bench matmul --json --iters 1 -w 0 --algo cannon --m 70 --n 50 --k 45 > "$TMP/mpi2" 2>&1 \
    || { cat "$TMP/mpi2"; echo "FAIL: cannon over MPI"; exit 1; }
else
  echo "note: mpirun not installed; the MPI runs were not made"
fi

# Bad input: a clear error naming what is wrong, never a crash.
bad() {  # expected text, args...
  local want=$1; shift
  if "$BIN" bench matmul "$@" > "$TMP/bad" 2>&1; then echo "FAIL: accepted: $*"; exit 1; fi
  grep -qi -- "$want" "$TMP/bad" || { cat "$TMP/bad"; echo "FAIL: error for '$*' does not say '$want'"; exit 1; }
}
bad "strassen" --algo strassen -n 2
bad "grid" --grid 3x3 -n 2 --m 10 --n 10 --k 10
bad "grid" --grid two -n 2
bad "positive" --m 0 -n 2
bad "cannon" --algo cannon -n 2 --m 10 --n 10 --k 10
echo PASS
