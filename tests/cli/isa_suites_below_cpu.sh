#!/usr/bin/env bash
# The kernel (Llama's included), precision, GPT, Llama (tensor-parallel too), LoRA and collective suites again at every ISA level
# below the CPU's (MESHTRAIN_ISA, inherited by the ranks the collective tests
# start), so an AVX-512 machine also proves the AVX2 and scalar paths end to
# end; the default ctest run covers the CPU's own level. Skipped (77) when the
# CPU has only the scalar level.
set -euo pipefail
# This script picks the levels itself and must see the CPU's own level, also
# when the whole suite runs under a MESHTRAIN_ISA cap.
unset MESHTRAIN_ISA MESHTRAIN_ISA_LIBS_CAPPED OPENBLAS_CORETYPE ONEDNN_MAX_CPU_ISA
BIN=$1
TESTS=$(cd "$(dirname "$BIN")/../tests" && pwd)
cpu_level=$("$BIN" --version | sed -n 's/^  dispatch level: \([a-z0-9]*\).*/\1/p')
levels=()
for l in scalar avx2 avx512; do
  [ "$l" = "$cpu_level" ] && break
  levels+=("$l")
done
[ ${#levels[@]} -gt 0 ] || { echo "skipped: this CPU has only the scalar level"; exit 77; }
suites=(kernels_test llama_kernels_test llama_test llama_tp_mp_test gpt_tp_mp_test precision_convert_test precision_gemm_test gpt_test lora_test comm_collectives_mp_test)
for l in "${levels[@]}"; do
  for s in "${suites[@]}"; do
    echo "== MESHTRAIN_ISA=$l $s"
    MESHTRAIN_ISA=$l OMP_NUM_THREADS=1 "$TESTS/$s" --gtest_brief=1 || { echo "FAIL: $s at $l"; exit 1; }
  done
done
echo "PASS: ${suites[*]} at ${levels[*]} (this CPU: $cpu_level)"
