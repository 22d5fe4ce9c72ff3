#!/usr/bin/env bash
# Runs meshtrain's allreduce sweep and the MPI_Allreduce peer alternately
# (ROUNDS times each, so background load hits both alike) and keeps every
# table under OUT_DIR. Usage: run_side_by_side.sh BUILD_DIR [RANKS] [ROUNDS] [MAXBYTES]
set -euo pipefail
build=${1:?build dir}; n=${2:-2}; rounds=${3:-3}; max=${4:-64M}
out=${OUT_DIR:-/tmp/meshtrain-comm-bench}
mkdir -p "$out"
mpirun_flags="--oversubscribe"
[ "$(id -u)" = 0 ] && mpirun_flags="$mpirun_flags --allow-run-as-root"
for r in $(seq 1 "$rounds"); do
  "$build/bin/meshtrain" bench comm -n "$n" -b 8 -e "$max" -f 4 > "$out/meshtrain_n${n}_r$r.txt"
  "$build/bin/meshtrain" bench comm -n "$n" -b 8 -e "$max" -f 4 --shared > "$out/meshtrain_shared_n${n}_r$r.txt"
  mpirun $mpirun_flags -n "$n" "$build/bin/mpi_allreduce_perf" -b 8 -e "$max" -f 4 > "$out/mpi_n${n}_r$r.txt"
  # PyTorch gloo, when installed.
  if python3 -c "import torch.distributed" 2>/dev/null; then
    python3 "$(dirname "$0")/gloo_allreduce.py" "$n" "$max" > "$out/gloo_n${n}_r$r.txt" || true
  fi
done
echo "tables in $out"
