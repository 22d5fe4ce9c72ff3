# Sourced by the CLI test scripts (run as `bash SCRIPT BINARY SOURCE_DIR`):
# BIN and SRC from the arguments, a TMP directory removed at exit, fail,
# write_token_shard, and PYTHON with need_python_packages.
BIN=$1
SRC=${2:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Under pipefail, `producer | grep -q` fails by chance: grep -q exits at the
# first match and the producer dies of SIGPIPE. Tests write `| grep ... >/dev/null`
# (grep reads all its input) or use a here-string.
# write_token_shard FILE VOCAB SEED: 20000 random tokens below VOCAB in llm.c's
# shard format (a model's own small vocabulary, e.g. a test fixture's).
write_token_shard() {
  python3 - "$1" "$2" "$3" <<'PY'
import random, struct, sys
path, vocab, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(seed)
toks = [random.randrange(vocab) for _ in range(20000)]
hdr = [20240520, 1, len(toks)] + [0] * 253
open(path, "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(toks), *toks))
PY
}
# PYTHON runs the checks that load our files with the Python libraries users
# run (torch, transformers, safetensors, tensorboard): MESHTRAIN_PYTHON, which
# scripts/test.sh sets to its virtual environment (scripts/python-env.sh), else
# python3. need_python_packages MODULE...: returns when PYTHON imports them
# all; otherwise fails when MESHTRAIN_PYTHON named it (it was meant to have
# them), else skips (exit 77) saying why, with scripts/test.sh's reason when
# it could not make the environment (MESHTRAIN_PYTHON_UNAVAILABLE).
PYTHON=${MESHTRAIN_PYTHON:-python3}
need_python_packages() {
  local imports
  imports=$(IFS=,; echo "$*")
  "$PYTHON" -c "import $imports" 2>"$TMP/python_import_error" && return 0
  if [ -n "${MESHTRAIN_PYTHON:-}" ]; then
    cat "$TMP/python_import_error"
    fail "MESHTRAIN_PYTHON=$MESHTRAIN_PYTHON cannot import ${imports//,/, }"
  fi
  echo "skipped: python3 cannot import ${imports//,/, }" \
    "(${MESHTRAIN_PYTHON_UNAVAILABLE:-pip install -r tests/python-requirements.txt, or set MESHTRAIN_PYTHON})"
  exit 77
}
