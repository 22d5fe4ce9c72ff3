#!/usr/bin/env bash
# mpi_world.py on 3 ranks under mpirun; the INIT log shows the world group
# on the MPI transport and the sub-group on shared memory.
# Usage: mpi_world.sh <python with torch> <build/python>
set -euo pipefail
py=$1 pkg=$2
command -v mpirun >/dev/null || { echo "skipped: no mpirun (Open MPI)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
timeout 240 mpirun --allow-run-as-root --oversubscribe -n 3 \
  -x PYTHONPATH="$pkg" -x OMP_NUM_THREADS=1 -x MESHTRAIN_COMM_TRANSPORT=mpi \
  -x MESHTRAIN_DEBUG=INFO -x MESHTRAIN_DEBUG_SUBSYS=INIT -x MESHTRAIN_COMM_TIMEOUT=60 \
  "$py" "$here/mpi_world.py" "$tmp/store" >"$tmp/log" 2>&1 || { tail -30 "$tmp/log"; echo "FAIL: mpirun"; exit 1; }
grep "world over MPI" "$tmp/log"
grep "rank 0 of 3 over mpi" "$tmp/log" >/dev/null || { grep INIT "$tmp/log" | head; echo "FAIL: the world group is not on MPI"; exit 1; }
grep "rank 0 of 2 over shm" "$tmp/log" >/dev/null || { grep INIT "$tmp/log" | head; echo "FAIL: the sub-group is not on shm"; exit 1; }
echo "mpi_world: the world group over MPI, the sub-group over shared memory"
