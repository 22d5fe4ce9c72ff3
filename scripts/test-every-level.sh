#!/usr/bin/env bash
# Runs the built test suite (ctest in build/) at every ISA level this CPU
# offers from avx2 up (MESHTRAIN_ISA caps our kernels and, through the
# binary's re-execution, OpenBLAS and oneDNN), ROUNDS times each, optionally
# with one core kept busy by stress-ng (what a shared CI machine does to the
# suite), and prints one line per run and a summary. Needs a built tree
# (bash scripts/build.sh) and, with --load, Debian's stress-ng.
#   scripts/test-every-level.sh [--load] [--rounds N] [ctest args...]
#   scripts/test-every-level.sh --load --rounds 3 -L unit
set -euo pipefail
cd "$(dirname "$0")/../build"
load=0 rounds=1
while [ $# -gt 0 ]; do
  case $1 in
    --load) load=1; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    *) break ;;
  esac
done
unset MESHTRAIN_ISA MESHTRAIN_ISA_LIBS_CAPPED
top=$(./bin/meshtrain --version | sed -n 's/^ *dispatch level: *//p')
levels=()
for l in avx2 avx512 avx512bf16; do
  levels+=("$l")
  [ "$l" = "$top" ] && break
done
[ "$top" != scalar ] || { echo "this CPU has only the scalar level"; exit 77; }
stress_pid=""
if [ "$load" = 1 ]; then
  command -v stress-ng >/dev/null || { echo "--load needs stress-ng (apt-get install stress-ng)"; exit 2; }
  stress-ng --cpu 1 --timeout 0 --quiet &
  stress_pid=$!
  trap 'kill $stress_pid 2>/dev/null || true' EXIT
fi
summary=""
status=0
for r in $(seq 1 "$rounds"); do
  for l in "${levels[@]}"; do
    log=$(mktemp)
    start=$SECONDS
    set +e
    MESHTRAIN_ISA=$l ctest -j"${CTEST_JOBS:-2}" --timeout 900 "$@" >"$log" 2>&1
    rc=$?
    set -e
    line="round $r level $l load $load: $(grep -E '^[0-9]+% tests passed' "$log" || echo 'no result'), $((SECONDS - start)) s"
    echo "$line"
    grep -E '\(Failed\)|\(Timeout\)|\(SEGFAULT\)' "$log" | sed 's/^/    /' || true
    summary+="$line"$'\n'
    [ $rc -eq 0 ] || status=1
    rm -f "$log"
  done
done
printf 'summary:\n%s' "$summary"
exit $status
