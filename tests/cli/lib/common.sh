# Sourced by the CLI test scripts (run as `bash SCRIPT BINARY SOURCE_DIR`):
# BIN and SRC from the arguments, a TMP directory removed at exit, fail, and
# write_token_shard.
BIN=$1
SRC=${2:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
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
