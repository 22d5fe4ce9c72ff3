#!/usr/bin/env bash
# Configures and builds meshtrain into build/ (Release). Extra args go to cmake.
# MESHTRAIN_BUILD_TARGETS names the targets to build (default: all of them,
# tests included); the demo builds only the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
# shellcheck disable=SC2086 # a list of target names
cmake --build build -j"$JOBS" ${MESHTRAIN_BUILD_TARGETS:+--target $MESHTRAIN_BUILD_TARGETS}
