#!/usr/bin/env bash
# The portable binary on CPUs this machine is not. QEMU's user-mode emulator
# (qemu-user, installed by `scripts/install-deps.sh --tests`) runs the binary
# with the CPUID of another CPU: an AVX2-only AMD Zen 3 (EPYC-Milan), an AVX2
# Intel Haswell, and an x86-64-v2 Nehalem without AVX. Unlike the MESHTRAIN_ISA
# cap (isa_levels.sh), nothing here tells the program or its libraries what to
# use: the start-up detection must pick the level from CPUID, OpenBLAS and
# oneDNN pick their own kernels, and an AVX-512 (or, on Nehalem, AVX)
# instruction anywhere on the executed path stops the run with SIGILL.
# Each CPU runs `--version`, is refused a level above it, passes the kernel
# suites (each level it has against the scalar reference), and trains `tiny`
# for 3 steps on 2 ranks (fp32; bf16 on Zen 3: the conversion fallback without
# AVX512_BF16), with the same losses as this machine capped to that level, then
# samples the same text from the trained model.
set -euo pipefail
unset MESHTRAIN_ISA MESHTRAIN_ISA_LIBS_CAPPED OPENBLAS_CORETYPE ONEDNN_MAX_CPU_ISA
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(uname -m)" = x86_64 ] || skip "emulating x86-64 CPUs needs an x86-64 host (this is $(uname -m))"
QEMU=$(command -v qemu-x86_64 || true)
[ -n "$QEMU" ] || skip "qemu-x86_64 not installed (bash scripts/install-deps.sh --tests installs qemu-user)"
# QEMU emulates AVX2 and FMA from 7.2 on; older ones would report no AVX2.
qv=$("$QEMU" --version | sed -n 's/.*version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
read -r qmaj qmin <<<"$qv"
if [ "${qmaj:-0}" -lt 7 ] || { [ "$qmaj" -eq 7 ] && [ "$qmin" -lt 2 ]; }; then
  skip "qemu-x86_64 $qmaj.$qmin emulates no AVX2 (7.2 or newer needed)"
fi
version=$("$BIN" --version 2>&1) || { echo "$version"; fail "--version failed"; }
build=$(grep 'build:' <<<"$version" | sed 's/^ *//')
grep -q "build: portable" <<<"$build" || skip "a -DMESHTRAIN_NATIVE=ON build targets this CPU only"
# The host may be x86-64 while the binary is not (an aarch64 build run through binfmt_misc).
grep -q "x86-64" <<<"$build" || skip "the binary is not an x86-64 build ($build)"

# `emulate CPU CMD...` runs CMD under that CPU; QEMU's notes on host features
# it does not emulate (pcid, rdseed, ...) are dropped from its stderr. The
# filter is a pipeline stage, not a process substitution: the latter runs on
# after CMD returns, so a caller reading CMD's error output from a file could
# read it before the filter had written it (seen on a loaded machine).
emulate() {
  local cpu=$1 rc; shift
  exec 3>&1
  "$QEMU" -cpu "$cpu" "$@" 2>&1 1>&3 3>&- |
    { grep -v "TCG doesn't support requested feature" >&2 || true; }
  rc=${PIPESTATUS[0]}
  exec 3>&-
  return "$rc"
}

TESTS=$(cd "$(dirname "$BIN")/../tests" && pwd)
"$BIN" data synth --out "$TMP/data" --tokens 40000 >/dev/null
# telemetry.peak_gflops: MFU's start-up GEMM measurement takes a minute emulated.
ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set model.seq_len=64
      --set data.train="$TMP/data/train_*.bin" --set data.val="$TMP/data/val_*.bin"
      --set train.steps=3 --set train.micro_batch=2 --set train.warmup=1 --set train.lr=1e-3
      --set train.eval_every=0 --set train.threads=1 --set checkpoint.every=0
      --set telemetry.peak_gflops=1)

# check_losses A B TOL: the runs' metrics give the same losses within TOL (relative).
check_losses() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY'
import json, sys
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
la = [json.loads(x)["loss"] for x in open(a)]
lb = [json.loads(x)["loss"] for x in open(b)]
assert len(la) == len(lb) == 3, (la, lb)
for x, y in zip(la, lb):
    assert abs(x - y) <= tol * abs(y), f"emulated {la} vs native {lb}"
print(f"  losses {la} match native {lb} (tolerance {tol})")
PY
}

for entry in EPYC-Milan:avx2:avx512 Haswell:avx2:avx512 Nehalem:scalar:avx2; do
  IFS=: read -r cpu level above <<<"$entry"
  echo "== $cpu (expected level: $level)"
  emulate "$cpu" "$BIN" --version >"$TMP/v_$cpu" 2>&1 || { cat "$TMP/v_$cpu"; fail "--version on $cpu"; }
  grep -q "dispatch level: $level\$" "$TMP/v_$cpu" || { cat "$TMP/v_$cpu"; fail "$cpu: level is not $level"; }
  grep "f32 GEMM" "$TMP/v_$cpu"
  if MESHTRAIN_ISA=$above emulate "$cpu" "$BIN" --version >"$TMP/bad" 2>&1; then
    fail "MESHTRAIN_ISA=$above accepted on $cpu"
  fi
  grep -q "asks for more than this CPU" "$TMP/bad" || { cat "$TMP/bad"; fail "$cpu: unclear error for $above"; }

  for suite in isa_kernels_test kernels_test llama_kernels_test precision_gemm_test; do
    emulate "$cpu" "$TESTS/$suite" --gtest_brief=1 >"$TMP/suite.log" 2>&1 ||
      { cat "$TMP/suite.log"; fail "$suite on $cpu"; }
    echo "  $suite: $(grep -h '^\[  PASSED\|^\[  SKIPPED \] [0-9]' "$TMP/suite.log" | tr '\n' ' ')"
  done

  precisions=(fp32)
  [ "$cpu" = EPYC-Milan ] && precisions+=(bf16)
  for p in "${precisions[@]}"; do
    MESHTRAIN_ISA=$level "$BIN" train "${ARGS[@]}" --set precision=$p --nproc 2 \
      --set telemetry.dir="$TMP/native_${cpu}_$p" >"$TMP/native.log" 2>&1 ||
      { cat "$TMP/native.log"; fail "native run at $level ($p)"; }
    # Each rank is its own emulated process: the launcher starts QEMU.
    "$BIN" launch -n 2 -- "$QEMU" -cpu "$cpu" "$BIN" train "${ARGS[@]}" --set precision=$p \
      --set telemetry.dir="$TMP/emu_${cpu}_$p" >"$TMP/emu.log" 2>&1 ||
      { grep -v "TCG doesn't support" "$TMP/emu.log"; fail "2-rank training on $cpu ($p)"; }
    grep -q "dispatch $level " "$TMP/emu.log" || { grep "cpu:" "$TMP/emu.log"; fail "$cpu trained at another level"; }
    # The emulated CPU's OpenBLAS and oneDNN kernels may sum in another f32
    # order than the capped native run's: the data-parallel equivalence bound,
    # 1e-5 (tests/unit/dp_harness.h). bf16 also rounds activations to 8 bits,
    # where an f32 difference can flip a rounding (2^-8 of that value): 1e-4.
    # Measured equal on all three CPUs, fp32 and bf16.
    tol=1e-5
    [ "$p" = bf16 ] && tol=1e-4
    check_losses "$TMP/emu_${cpu}_$p" "$TMP/native_${cpu}_$p" $tol || fail "$cpu ($p): losses differ"
  done
  # Generation (KV-cache decoder) from the emulated run's model: the same text as native.
  SAMPLE=(sample --model "$TMP/emu_${cpu}_fp32/model.safetensors" --prompt "ab" --tokens 40 --seed 3)
  emulate "$cpu" "$BIN" "${SAMPLE[@]}" >"$TMP/s_emu" 2>/dev/null || fail "sample on $cpu"
  MESHTRAIN_ISA=$level "$BIN" "${SAMPLE[@]}" >"$TMP/s_nat" 2>/dev/null || fail "native sample at $level"
  cmp -s "$TMP/s_emu" "$TMP/s_nat" || { diff "$TMP/s_emu" "$TMP/s_nat"; fail "$cpu samples other text"; }
  echo "  sample: the same $(wc -c <"$TMP/s_emu") bytes as native"
done
echo PASS
