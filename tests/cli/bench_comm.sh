#!/usr/bin/env bash
# `meshtrain bench comm` runs every op on 3 ranks (in and out of place), with the
# #wrong column checked, and exits 0; the largest size ends the buffer exactly
# (the in-place allgather once overran it there and aborted rank 1).
set -euo pipefail
BIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

for n in 2 3; do
  "$BIN" bench comm -n "$n" --op allreduce,reduce_scatter,allgather,broadcast,reduce,alltoall \
    -b 8 -e 256K -f 8 --iters 2 -w 1 > "$TMP/out_$n" 2>&1 || { cat "$TMP/out_$n"; echo "FAIL: bench comm -n $n"; exit 1; }
  rows=$(grep -vc '^#' "$TMP/out_$n" || true)
  [ "$rows" -ge 30 ] || { cat "$TMP/out_$n"; echo "FAIL: expected >= 30 rows, got $rows"; exit 1; }
  # Columns 9 and 13 are #wrong out of place and in place (-1 timing: alltoall has no in-place row).
  awk '!/^#/ && ($9 != 0 || ($13 != 0 && $10 != -1 && $10 != "-1.00")) { bad = 1; print "wrong:", $0 } END { exit bad }' \
    "$TMP/out_$n" || { echo "FAIL: #wrong is not 0"; exit 1; }
done
# A bad flag is a clear error, not a crash.
if "$BIN" bench comm -n 2 --op allscatter > "$TMP/bad" 2>&1; then echo "FAIL: unknown op accepted"; exit 1; fi
grep -qi "allscatter" "$TMP/bad" || { cat "$TMP/bad"; echo "FAIL: error does not name the op"; exit 1; }
echo PASS
