#!/usr/bin/env bash
# The test command of the README: install dependencies, make the Python
# environment (scripts/python-env.sh), build, run every test.
# Pass ctest arguments to narrow it, e.g. `scripts/test.sh -L unit`. A full
# run (no arguments) first runs the comm tests under ThreadSanitizer too
# (scripts/tsan-comm.sh, about a minute; MESHTRAIN_SKIP_TSAN=1 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
# What each step took, printed at the end (docs/ARCHITECTURE.md, "CI").
timings=""
step_start=$SECONDS
step_done() {
  timings="${timings}  $1: $((SECONDS - step_start)) s"$'\n'
  step_start=$SECONDS
}
bash scripts/install-deps.sh --tests
step_done dependencies
# The virtual environment with torch, transformers, safetensors and tensorboard
# in which the tests check our exports (scripts/python-env.sh; reused when
# made before). Its python reaches the tests as MESHTRAIN_PYTHON; only an
# unreachable package index leaves it out, and then those tests skip with
# MESHTRAIN_PYTHON_UNAVAILABLE's reason. A MESHTRAIN_PYTHON set by the caller
# is used as it is.
if [ -n "${MESHTRAIN_PYTHON:-}" ]; then
  echo "test: the export checks run in MESHTRAIN_PYTHON=$MESHTRAIN_PYTHON"
else
  py_status=0
  py=$(bash scripts/python-env.sh) || py_status=$?
  case $py_status in
    0) export MESHTRAIN_PYTHON=$py ;;
    3) export MESHTRAIN_PYTHON_UNAVAILABLE=$py
       echo "test: $py; the tests that need it are skipped" ;;
    *) echo "test: scripts/python-env.sh failed (status $py_status)"; exit "$py_status" ;;
  esac
fi
step_done "Python environment"
bash scripts/build.sh
step_done build
if [ $# -eq 0 ] && [ "${MESHTRAIN_SKIP_TSAN:-0}" != 1 ]; then
  bash scripts/tsan-comm.sh
  step_done "ThreadSanitizer comm tests"
fi
cd build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
ctest --output-on-failure -j"${CTEST_JOBS:-2}" --timeout 900 "$@" | tee "$log"
status=${PIPESTATUS[0]}
set -e
# Skipped tests (e.g. an ISA level this CPU lacks) are not passes: count them,
# and list each with the reason its output gave (ctest keeps the output of
# tests that did not fail only in Testing/Temporary/LastTest.log): a script's
# "skipped: ..." line, or the line after GoogleTest's "file:line: Skipped".
skipped=$(grep -c '\*\*\*Skipped' "$log" || true)
echo "skipped: ${skipped} test(s) (not counted as passed)"
reasons=$(awk '/^[0-9]+\/[0-9]+ Testing: / { name = $3; after_skip = 0; next }
  name != "" && !(name in seen) && (/^skipped: / || after_skip) { seen[name]; print name "\t" $0 }
  { after_skip = /: Skipped$/ }' Testing/Temporary/LastTest.log 2>/dev/null || true)
grep '\*\*\*Skipped' "$log" | sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' | while read -r name; do
  reason=$(printf '%s\n' "$reasons" | awk -F'\t' -v n="$name" '$1 == n { print $2; exit }')
  echo "  ${name}: ${reason:-(see build/Testing/Temporary/LastTest.log)}"
done || true
step_done ctest
echo "time per step:"
printf '%s' "$timings"
exit "$status"
