#!/usr/bin/env bash
# The test command of the README: install dependencies, build, run every test.
# Pass ctest arguments to narrow it, e.g. `scripts/test.sh -L unit`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j"${CTEST_JOBS:-2}" --timeout 900 "$@"
