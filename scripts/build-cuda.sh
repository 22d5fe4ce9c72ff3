#!/usr/bin/env bash
# Builds the CUDA backend for Hopper (sm_90) into build-cuda/: the backend
# library, its tests and the meshtrain binary, then runs the `cuda` tests,
# which skip with the reason where no GPU is visible (never counted as
# passed). CI runs it after the test command so a broken CUDA build cannot
# land; without a GPU the tests are listed, not run. Needs nvcc (CUDA 13
# toolkit at /usr/local/cuda); without it this
# says so and exits 0, unless MESHTRAIN_REQUIRE_CUDA_BUILD=1.
# Extra arguments go to cmake (e.g. -DCMAKE_CUDA_ARCHITECTURES=90a).
# MESHTRAIN_CUDA_BUILD_DIR=build turns the backend on in an existing CPU build
# tree instead: no object above kernels/cuda/ changes with it (only
# kernel_table.cpp and relinks; src/meshtrain/CMakeLists.txt), so CI checks the
# CUDA build in ~2-3 minutes instead of rebuilding every layer. That tree's
# binaries are then CUDA builds.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
if ! command -v nvcc >/dev/null; then
  echo "build-cuda: nvcc not found (install the CUDA toolkit); the CUDA build was NOT checked"
  [ "${MESHTRAIN_REQUIRE_CUDA_BUILD:-0}" = 1 ] && exit 1
  exit 0
fi
JOBS=${JOBS:-$(nproc)}
dir=${MESHTRAIN_CUDA_BUILD_DIR:-build-cuda}
start=$SECONDS
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DMESHTRAIN_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${MESHTRAIN_CUDA_ARCH:-90}" "$@" >/dev/null
# Every test binary under tests/cuda/ (cuda_*_test) and benchmark under bench/cuda/ (cuda_*_bench).
targets=$(cmake --build "$dir" --target help | sed -n 's/^\.\.\. \(cuda_[a-z0-9_]*_\(test\|bench\)\)$/\1/p')
cmake --build "$dir" -j"$JOBS" --target mt_cuda meshtrain_cli $targets
echo "build-cuda: built in $dir/ in $((SECONDS - start)) s ($(nvcc --version | tail -1))"
cd "$dir"
# Without a GPU every `cuda` test would only skip; running them would print a
# ctest summary of skips that reads like a test run. List them instead and say
# they did not run (scripts/gpu-check.sh runs them on the GPU machine).
if ! nvidia-smi -L >/dev/null 2>&1; then
  count=$(ctest -L cuda -N | sed -n 's/^Total Tests: //p')
  echo "build-cuda: no GPU visible (nvidia-smi -L fails); the ${count:-0} \`cuda\` tests were built, NOT run" \
       "(not counted as passed; scripts/gpu-check.sh runs them on a GPU machine)"
  exit 0
fi
ctest -L cuda --output-on-failure -j"${CTEST_JOBS:-2}" --timeout 600
