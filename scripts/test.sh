#!/usr/bin/env bash
# The test command of the README: install dependencies, build, run every test.
# Pass ctest arguments to narrow it, e.g. `scripts/test.sh -L unit`. A full
# run (no arguments) first runs the comm tests under ThreadSanitizer too
# (scripts/tsan-comm.sh, about a minute; MESHTRAIN_SKIP_TSAN=1 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --tests
bash scripts/build.sh
if [ $# -eq 0 ] && [ "${MESHTRAIN_SKIP_TSAN:-0}" != 1 ]; then
  bash scripts/tsan-comm.sh
fi
cd build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
ctest --output-on-failure -j"${CTEST_JOBS:-2}" --timeout 900 "$@" | tee "$log"
status=${PIPESTATUS[0]}
set -e
# Skipped tests (e.g. an ISA level this CPU lacks) are not passes: count them.
skipped=$(grep -c '\*\*\*Skipped' "$log" || true)
echo "skipped: ${skipped} test(s) (not counted as passed; ctest prints each with its reason above)"
grep '\*\*\*Skipped' "$log" | sed 's/^ */  /' || true
exit "$status"
