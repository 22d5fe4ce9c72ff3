#!/usr/bin/env bash
# MESHTRAIN_SGEMM picks the f32 GEMM backend per shape, and the benchmarks say
# what ran: `bench gemm` names each shape's backend and counts oneDNN's shapes;
# `bench train --json` lists the timed shapes and quotes MFU against the faster
# backend's peak, whatever the policy. A bad value is a clear error.
set -uo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail
# char-2L at batch 8 x 64: the linear layers' GEMMs are above auto's 16 MFLOP floor.
SHAPE=(--preset char-2L --batch 8 --seq 64)

"$BIN" bench gemm "${SHAPE[@]}" --reps 1 --threads 1 >"$TMP/auto" 2>&1 || { cat "$TMP/auto"; fail "bench gemm (auto) failed"; }
grep -q "f32: MESHTRAIN_SGEMM=auto" "$TMP/auto" || { cat "$TMP/auto"; fail "policy not named"; }
grep -qE "sgemm picked onednn for [0-9]+ of 15 shapes" "$TMP/auto" || { cat "$TMP/auto"; fail "no pick summary"; }
MESHTRAIN_SGEMM=openblas "$BIN" bench gemm "${SHAPE[@]}" --reps 1 --threads 1 >"$TMP/blas" 2>&1 ||
  { cat "$TMP/blas"; fail "bench gemm (openblas) failed"; }
grep -q "sgemm picked onednn for 0 of 15 shapes" "$TMP/blas" || { cat "$TMP/blas"; fail "MESHTRAIN_SGEMM=openblas still picked onednn"; }
MESHTRAIN_SGEMM=mkl "$BIN" bench gemm "${SHAPE[@]}" --reps 1 >"$TMP/bad" 2>&1 && fail "MESHTRAIN_SGEMM=mkl accepted"
grep -q 'MESHTRAIN_SGEMM = "mkl": expected auto, openblas or onednn' "$TMP/bad" || { cat "$TMP/bad"; fail "no clear error for a bad MESHTRAIN_SGEMM"; }

for pol in auto openblas; do
  MESHTRAIN_SGEMM=$pol "$BIN" bench train "${SHAPE[@]}" --steps 1 --warmup 1 --threads 1 --json >"$TMP/bt_$pol" 2>&1 ||
    { cat "$TMP/bt_$pol"; fail "bench train ($pol) failed"; }
done
python3 - "$TMP/bt_auto" "$TMP/bt_openblas" <<'PY' || fail "bench train's sgemm report is wrong"
import json, sys
auto, blas = (json.loads([l for l in open(p) if l.startswith("{")][-1]) for p in sys.argv[1:3])
# The JSON's doubles round-trip exactly: the identities below hold to a
# division's rounding (~1e-16 relative); 1e-9 is slack.
for j in (auto, blas):
    peak = max(j["sgemm_peak_openblas_gflops"], j["sgemm_peak_onednn_gflops"])
    assert abs(j["sgemm_peak_gflops"] - peak) < 1e-9, ("MFU peak is not the faster backend's", j)
    assert abs(j["mfu"] - j["model_gflops"] / j["sgemm_peak_gflops"]) < 1e-9, j
assert blas["sgemm_policy"] == "openblas" and blas["sgemm_timed_shapes"] == 0, blas
assert blas["sgemm"].startswith("sgemm: openblas"), blas["sgemm"]
assert auto["sgemm_policy"] == "auto", auto
if "not built in" in auto["sgemm"] or "without oneDNN" in auto["sgemm"]:
    assert auto["sgemm_timed_shapes"] == 0, auto
else:
    # Every linear layer's forward and backward shapes were timed once each.
    assert auto["sgemm_timed_shapes"] >= 10, auto["sgemm_shapes"]
    assert auto["sgemm_onednn_shapes"] == sum(s["backend"] == "onednn" for s in auto["sgemm_shapes"])
    for s in auto["sgemm_shapes"]:
        faster = "onednn" if s["onednn_ms"] < s["openblas_ms"] else "openblas"
        assert s["backend"] == faster, s
print("sgemm report ok:", auto["sgemm"])
PY
echo "sgemm_backend_bench: ok"
