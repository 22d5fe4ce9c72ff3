#!/usr/bin/env bash
# Installs every Debian package that meshtrain's build, tests and main job need.
# Idempotent and non-interactive; skips apt entirely when all are present.
# `--tests` adds what only the test suite needs (scripts/test.sh passes it).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  ccache                          # a rebuild in another clone recompiles only what changed (cmake/CompilerCache.cmake)
  libopenblas-openmp-dev          # GEMM (OpenMP build: shares our thread pool)
  libdnnl-dev                     # oneDNN: bf16 GEMM on AVX512_BF16 (mixed precision)
  libopenmpi-dev openmpi-bin      # MPI transport and the MPI_Allreduce peer
  libscalapack-openmpi-dev        # ScaLAPACK pdgemm: the peer of meshtrain bench matmul
  nlohmann-json3-dev              # configs, safetensors headers, checkpoint indexes
  libcli11-dev                    # command line
  libfmt-dev                      # formatting
  libgtest-dev libgmock-dev       # tests
  libbenchmark-dev                # micro-benchmarks
  libzstd-dev                     # compression
  libpcre2-dev                    # tokenizer pre-tokenization regexes (Unicode, JIT)
  libjpeg62-turbo-dev libpng-dev  # image data: JPEG and PNG decoding (data prepare-images)
  zlib1g-dev                      # gzip-compressed IDX files (MNIST, Fashion-MNIST)
  dataset-fashion-mnist           # Fashion-MNIST's IDX files (ResNet's accuracy target, tests)
  fortunes                        # English text for the default corpus
  python3                         # a few CLI tests check JSON output with it
)
if [ "${1:-}" = --tests ]; then
  PACKAGES+=(
    qemu-user                     # runs the binary as other x86-64 CPUs (cli.isa_emulated_cpus) and the aarch64 build (scripts/aarch64-emulated.sh)
    python3-venv                  # scripts/python-env.sh: the venv with torch, transformers, tensorboard for the export checks
    iproute2 util-linux           # ip netns and unshare: emulated hosts (scripts/netns-hosts.sh, cli.multinode_mpirun)
    slurmctld slurmd slurm-client munge  # a real Slurm cluster of emulated hosts (scripts/slurm-local.sh, cli.slurm_cluster)
  )
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
