# Sourced by the CLI test scripts (run as `bash SCRIPT BINARY SOURCE_DIR`):
# BIN and SRC from the arguments, a TMP directory removed at exit, and fail.
BIN=$1
SRC=${2:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
