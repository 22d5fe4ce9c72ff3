#!/usr/bin/env bash
# Cross-compiles the core libraries and the `meshtrain` CLI for aarch64 into
# build-aarch64/ (cmake/toolchain-aarch64.cmake) and checks the result is an
# aarch64 ELF; then, where build/bin/meshtrain exists, runs it under QEMU
# against that native build (scripts/aarch64-emulated.sh, 3-11 s).
# A CI guard: x86-only code (intrinsics or __builtin_cpu_supports outside the
# guarded, dispatched ISA files) fails here, and so does a library or CLI
# file that does not include the project headers it uses.
# Installs, once, Debian's aarch64 cross g++ and the arm64 -dev packages the
# CLI links (multiarch); oneDNN, MPI and the tests are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
start=$SECONDS

# Host tools and arch-independent headers; arm64 libraries via multiarch.
HOST_PACKAGES=(cmake make file g++-aarch64-linux-gnu nlohmann-json3-dev libcli11-dev)
ARM64_PACKAGES=(libopenblas-openmp-dev:arm64 libfmt-dev:arm64 libpcre2-dev:arm64
  libjpeg62-turbo-dev:arm64 libpng-dev:arm64 zlib1g-dev:arm64)

missing=()
for p in "${HOST_PACKAGES[@]}" "${ARM64_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "cross-aarch64: all packages present"
else
  echo "cross-aarch64: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "cross-aarch64: installed in $((SECONDS - start)) s"
fi

build_start=$SECONDS
# Build type None: no optimization. The guard is about what compiles and
# links, and -O3 would cost ~90 s more of CI. Each file is compiled on its
# own (no unity batches), so a file that only builds on another file's
# includes fails here; the precompiled third-party headers stay on (json,
# fmt and a few std headers reach every file through them; without them this
# step took 791 s of the 2-core CI machine's ~49 minutes).
cmake -S . -B build-aarch64 -DCMAKE_BUILD_TYPE=None -DMESHTRAIN_UNITY=OFF \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/toolchain-aarch64.cmake" \
  -DMESHTRAIN_BUILD_TESTS=OFF -DMESHTRAIN_WITH_MPI=OFF "$@" >/dev/null
cmake --build build-aarch64 -j"$JOBS" --target meshtrain_cli

bin=build-aarch64/bin/meshtrain
desc=$(file -b "$bin")
echo "cross-aarch64: $bin: $desc"
case "$desc" in
  ELF\ 64-bit*ARM\ aarch64*) ;;
  *) echo "cross-aarch64: $bin is not an aarch64 ELF" >&2; exit 1 ;;
esac
echo "cross-aarch64: built in $((SECONDS - build_start)) s"
# Run it, emulated, against the native build when there is one (CI: the
# README's test command built it just before).
if [ -x build/bin/meshtrain ]; then
  bash scripts/aarch64-emulated.sh "$bin" build/bin/meshtrain
elif [ "${MESHTRAIN_REQUIRE_AARCH64_RUN:-0}" = 1 ]; then
  echo "cross-aarch64: no native build/bin/meshtrain to run the aarch64 build against" >&2
  exit 1
fi
echo "cross-aarch64: $((SECONDS - start)) s in all"
