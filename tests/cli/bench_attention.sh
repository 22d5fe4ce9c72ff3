#!/usr/bin/env bash
# `meshtrain bench attention` times every attention path this build has on
# real shapes and prints one parseable JSON object per path; a sequence longer
# than the model's context is a clear usage error.
set -euo pipefail
BIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$BIN" bench attention --preset char-2L --batch 2 --seq 70 --threads 1 --reps 2 --json > "$TMP/out" 2>&1 \
  || { cat "$TMP/out"; echo "FAIL: bench attention"; exit 1; }
python3 - "$TMP/out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
paths = {r["path"] for r in rows}
assert "gemm" in paths, rows
for r in rows:
    assert r["fwd_ms"] > 0 and r["bwd_ms"] > 0 and r["gflops"] > 0, r
    assert r["seq"] == 70 and r["batch"] == 2, r
print("paths:", sorted(paths))
PY
"$BIN" bench attention --preset char-2L > "$TMP/text" 2>&1 || { cat "$TMP/text"; echo "FAIL: text output"; exit 1; }
grep -q "gemm" "$TMP/text" || { cat "$TMP/text"; echo "FAIL: no gemm row"; exit 1; }
if "$BIN" bench attention --preset char-2L --seq 4096 > "$TMP/bad" 2>&1; then echo "FAIL: --seq past the context accepted"; exit 1; fi
grep -qi "seq" "$TMP/bad" || { cat "$TMP/bad"; echo "FAIL: error does not name --seq"; exit 1; }
echo PASS
