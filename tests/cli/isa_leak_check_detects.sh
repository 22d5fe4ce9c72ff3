#!/usr/bin/env bash
# tools/check_isa_leaks.py can fail: a program whose plain function is
# compiled for AVX2 is reported (with the function's name), the same program
# compiled for the baseline passes, and AVX2 inside an isa_avx2:: function
# is allowed. (x86-64 only: skipped elsewhere.)
set -euo pipefail
SRC=$2
[ "$(uname -m)" = x86_64 ] || { echo "skipped: not x86-64"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat > "$TMP/p.cpp" <<'CPP'
namespace meshtrain::cpu::isa_avx2 {
__attribute__((noinline)) void scale_allowed(float* x, long n) { for (long i = 0; i < n; ++i) x[i] *= 3.f; }
}
__attribute__((noinline)) void scale_leaky(float* x, long n) { for (long i = 0; i < n; ++i) x[i] *= 2.f; }
int main(int argc, char**) { float x[64] = {}; scale_leaky(x, argc * 32); meshtrain::cpu::isa_avx2::scale_allowed(x, argc * 32); return x[0] != 0; }
CPP
g++ -O3 -march=x86-64-v2 "$TMP/p.cpp" -o "$TMP/base"
python3 "$SRC/tools/check_isa_leaks.py" "$TMP/base" || { echo "FAIL: baseline program reported"; exit 1; }
g++ -O3 -march=x86-64-v3 "$TMP/p.cpp" -o "$TMP/leaky"
if python3 "$SRC/tools/check_isa_leaks.py" "$TMP/leaky" >"$TMP/out"; then cat "$TMP/out"; echo "FAIL: AVX2 leak not found"; exit 1; fi
grep -q "scale_leaky" "$TMP/out" || { cat "$TMP/out"; echo "FAIL: the leaking function is not named"; exit 1; }
if grep -q "scale_allowed" "$TMP/out"; then cat "$TMP/out"; echo "FAIL: an isa_avx2 function was reported"; exit 1; fi
echo PASS
