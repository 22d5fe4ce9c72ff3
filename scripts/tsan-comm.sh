#!/usr/bin/env bash
# Builds the comm layer and its tests with ThreadSanitizer into build-tsan/
# and runs them. Each rank is its own process, so TSan checks what races
# inside a rank: the progress engine, Work handles, the flight recorder, the
# launcher-facing error paths. The shared-memory protocol between ranks is
# cross-process and invisible to TSan (docs/COMM.md).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
targets=(comm_unit_test comm_collectives_mp_test comm_p2p_mp_test comm_failures_mp_test comm_exit_race_mp_test)
# -O1 with line tables only (-g1): the reports keep their file:line stacks,
# the build is shorter than at -O2 -g (RelWithDebInfo's default).
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESHTRAIN_TSAN=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DMESHTRAIN_WITH_MPI=OFF >/dev/null
cmake --build build-tsan -j"$JOBS" --target "${targets[@]}"
# halt_on_error: a report fails the rank, so the test that forked it fails.
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan-comm.supp ${TSAN_OPTIONS:-}"
export OMP_NUM_THREADS=1
status=0
for t in "${targets[@]}"; do
  echo "== ThreadSanitizer: $t"
  "build-tsan/tests/$t" --gtest_brief=1 || status=1
done
exit $status
