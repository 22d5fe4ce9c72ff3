#!/usr/bin/env bash
# The mixed-precision benchmarks run and say which GEMM path ran:
# `bench gemm` (bf16 vs sgemm per GEMM shape) and `bench train --precision`
# (fp32 and bf16/fp16 side by side), human and JSON output; bad values are
# usage errors.
set -uo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" bench gemm --preset tiny --batch 2 --reps 1 >"$TMP/gemm" 2>&1 || { cat "$TMP/gemm"; fail "bench gemm failed"; }
grep -qE "bf16 GEMM: oneDNN .* avx512_bf16|fallback: fp32 sgemm" "$TMP/gemm" || { cat "$TMP/gemm"; fail "no GEMM path named"; }
grep -q "fc dW (TN)" "$TMP/gemm" || { cat "$TMP/gemm"; fail "no weight-gradient GEMM row"; }
# The dispatch level (the CPU's, or MESHTRAIN_ISA's cap) decides the path.
if "$BIN" --version | grep "dispatch level: avx512bf16" >/dev/null; then
  grep -q "bf16 GEMM: oneDNN" "$TMP/gemm" || { cat "$TMP/gemm"; fail "AVX512_BF16 level but the oneDNN path did not run"; }
else
  grep -q "fallback: fp32 sgemm" "$TMP/gemm" || { cat "$TMP/gemm"; fail "below avx512bf16 but the fallback is not reported"; }
fi
MESHTRAIN_BF16_GEMM=fallback "$BIN" bench gemm --preset tiny --batch 2 --reps 1 >"$TMP/fb" 2>&1 ||
  { cat "$TMP/fb"; fail "forced fallback failed"; }
grep -q "fallback: fp32 sgemm (MESHTRAIN_BF16_GEMM=fallback)" "$TMP/fb" || { cat "$TMP/fb"; fail "fallback not reported"; }

"$BIN" bench train --preset tiny --batch 2 --steps 2 --warmup 1 --threads 1 --precision bf16 >"$TMP/bt" 2>&1 ||
  { cat "$TMP/bt"; fail "bench train --precision bf16 failed"; }
grep -q "bf16 vs fp32" "$TMP/bt" && grep -q "speedup bf16 / fp32" "$TMP/bt" && grep -q "bf16 path:" "$TMP/bt" ||
  { cat "$TMP/bt"; fail "bench train --precision output incomplete"; }
"$BIN" bench train --preset tiny --batch 2 --steps 1 --warmup 0 --threads 1 --precision fp16 --json >"$TMP/bj" 2>&1 ||
  { cat "$TMP/bj"; fail "bench train --precision fp16 --json failed"; }
python3 - "$TMP/bj" <<'PY' || fail "bad JSON from bench train --precision fp16"
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert j["fp32"]["tokens_per_s"] > 0 and j["fp16"]["tokens_per_s"] > 0, j
assert "fallback: fp32 sgemm" in j["gemm_path"], j["gemm_path"]
assert j["speedup"] > 0
PY
"$BIN" bench train --preset tiny --precision bf16 --nproc 2 >"$TMP/np" 2>&1
[ $? -eq 2 ] && grep -q "drop --nproc" "$TMP/np" || { cat "$TMP/np"; fail "--precision with --nproc should be refused"; }
"$BIN" bench train --preset tiny --precision fp8 >"$TMP/bad" 2>&1
[ $? -eq 2 ] || { cat "$TMP/bad"; fail "--precision fp8 should be a usage error"; }
echo "precision_bench: ok"
