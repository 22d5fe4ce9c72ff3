#!/usr/bin/env bash
# Runs every `cuda` test (and, as they land, the GPU benchmarks) on a GPU
# machine that has CUDA 13 but none of Debian's -dev packages and no network.
#
#   bash scripts/gpu-check.sh pack   # here: build-cuda/ (scripts/build-cuda.sh),
#                                    # then .gpu-pack/: the binaries and the
#                                    # shared libraries they need that the GPU
#                                    # machine lacks, xz-compressed (~15 MB)
#   bash scripts/gpu-check.sh run [tests|bench|all]
#                                    # there, from the repository root with
#                                    # .gpu-pack/ carried along: unpack, run
#                                    # every `cuda` test binary and
#                                    # tests/cuda/train_cuda.sh (tests), the
#                                    # benchmarks (bench), or both (all, the
#                                    # default); one log and a summary into
#                                    # $OUT (or gpu-results/). With 15 device
#                                    # minutes a session, run tests and bench
#                                    # as two calls of under 5 minutes each.
#   Time caps (seconds): GPU_CHECK_TEST_S per test binary, GPU_CHECK_TRAIN_S
#   for train_cuda.sh, GPU_CHECK_GEMM_S per benchmark binary, GPU_CHECK_BENCH_S
#   for train_vs_torch_gpu.py (GPU_CHECK_BENCH_ARGS: its arguments).
#
# The bundle keeps the CPU libraries (OpenBLAS, oneDNN, fmt, PCRE2, OpenMP)
# as shared objects next to the binaries; CUDA's own libraries (cudart,
# cuBLASLt) come from the GPU machine's toolkit.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
pack=.gpu-pack

pack() {
  MESHTRAIN_REQUIRE_CUDA_BUILD=1 bash scripts/build-cuda.sh
  rm -rf "$pack" && mkdir -p "$pack/stage/bin" "$pack/stage/lib"
  cp build-cuda/bin/meshtrain "$pack/stage/bin/"
  find build-cuda/tests -maxdepth 2 -type f -name 'cuda_*_test' -exec cp {} "$pack/stage/bin/" \;
  cp build-cuda/bin/cuda_*_bench "$pack/stage/bin/" 2>/dev/null || true
  # Every shared library of those binaries except the C runtime, the
  # compiler's runtime (the GPU machine's is as new or newer) and CUDA's.
  for b in "$pack"/stage/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
    grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|/libcu|/libnv' |
    while read -r lib; do cp -L "$lib" "$pack/stage/lib/"; done
  tar -C "$pack/stage" -cf - . | xz -T"$(nproc)" -6 > "$pack/bundle.tar.xz"
  rm -rf "$pack/stage"
  echo "gpu-check: $pack/bundle.tar.xz ($(du -h "$pack/bundle.tar.xz" | cut -f1)); on the GPU machine:"
  echo "  bash scripts/gpu-check.sh run tests   then   bash scripts/gpu-check.sh run bench    (carry: $pack)"
}

# Unpacks the bundle into $dir and points the loader at it and at CUDA.
unpack() {
  mkdir -p "$out" && rm -rf "$dir" && mkdir -p "$dir"
  [ -f "$pack/bundle.tar.xz" ] || { echo "gpu-check: no $pack/bundle.tar.xz (run 'pack' first, carry $pack)"; exit 1; }
  if command -v xz >/dev/null; then
    xz -dc "$pack/bundle.tar.xz" | tar -C "$dir" -xf -
  else
    python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$pack/bundle.tar.xz" "$dir"
  fi
  local cuda_lib
  cuda_lib=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:${cuda_lib}:${LD_LIBRARY_PATH:-}"
  {
    echo "date: $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    "$dir/bin/meshtrain" --version || true
  } >> "$summary" 2>&1
}

# Every cuda_*_test binary, then whole training runs against the CPU.
run_tests() {
  for t in "$dir"/bin/cuda_*_test; do
    local name one status=0
    name=$(basename "$t")
    one="$dir/$name.out"
    timeout "${GPU_CHECK_TEST_S:-300}" "$t" --gtest_color=no > "$one" 2>&1 || status=$?
    { echo "=== $name (exit $status)"; cat "$one"; } >> "$log"
    [ "$status" = 0 ] || failed=1
    echo "$name: exit $status, $(grep -c '^\[       OK \]' "$one") passed, $(grep -c '^\[  SKIPPED \] .* ([0-9]* ms)$' "$one") skipped, $(grep -c '^\[  FAILED  \] .* ([0-9]* ms)$' "$one") failed" >> "$summary"
  done
  # The failed tests by name (skips are counted per binary above).
  grep -E '^\[  FAILED  \] [^ ]+ \(' "$log" | sort -u >> "$summary" || true
  # Whole training runs on the GPU against the CPU (tests/cuda/train_cuda.sh).
  local status=0
  timeout "${GPU_CHECK_TRAIN_S:-300}" bash tests/cuda/train_cuda.sh "$dir/bin/meshtrain" > "$dir/train_cuda.out" 2>&1 || status=$?
  { echo "=== train_cuda.sh (exit $status)"; cat "$dir/train_cuda.out"; } >> "$log"
  { echo "train_cuda.sh: exit $status"; grep -E 'largest relative|measured|FAIL' "$dir/train_cuda.out"; } >> "$summary" || true
  [ "$status" = 0 ] || failed=1
}

# Each benchmark prints our figure beside the vendor's or PyTorch's.
run_bench() {
  for b in "$dir"/bin/cuda_*_bench; do
    [ -x "$b" ] || continue
    { echo "=== $(basename "$b")"; timeout "${GPU_CHECK_GEMM_S:-120}" "$b" 2>&1 || echo "(exit $?)"; } | tee -a "$log" >> "$summary"
  done
  # Training throughput against PyTorch (eager and torch.compile) on this GPU.
  { echo "=== train_vs_torch_gpu.py"
    PYTHONUNBUFFERED=1 timeout "${GPU_CHECK_BENCH_S:-420}" python3 bench/cuda/train_vs_torch_gpu.py --binary "$dir/bin/meshtrain" ${GPU_CHECK_BENCH_ARGS:-} 2>&1 || echo "(exit $?)"
  } | tee -a "$log" | grep -vE '^(step|round) ' >> "$summary"
}

# run [tests|bench|all]: one log and a summary into $OUT (or gpu-results/).
run() {
  local what=${1:-all}
  out=${OUT:-gpu-results} dir=/tmp/meshtrain-gpu
  log="$out/gpu-check-$what.log" summary="$out/summary-$what.txt"
  failed=0
  mkdir -p "$out" && : > "$log" && : > "$summary"
  unpack
  case "$what" in
    tests) run_tests ;;
    bench) run_bench ;;
    all) run_tests; run_bench ;;
    *) echo "gpu-check: run tests|bench|all, not '$what'"; exit 2 ;;
  esac
  echo "--- summary" && cat "$summary"
  return $failed
}

case "$mode" in
  pack) pack ;;
  run) run "${2:-all}" ;;
  *) echo "usage: bash scripts/gpu-check.sh pack | run [tests|bench|all]"; exit 2 ;;
esac
