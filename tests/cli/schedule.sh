#!/usr/bin/env bash
# `meshtrain schedule`: the timeline of each stage for every schedule, its
# bubble equal to the formula (1F1B, GPipe, interleaved) or below 1F1B's
# (ZB-H1), the micro-batches each stage holds, the per-rank instruction lists,
# a Perfetto trace with one slice per op, and clear errors for bad shapes.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, TMP (removed at exit), fail

out=$("$BIN" schedule --pp 4 --micro-batches 8 --schedule 1f1b)
echo "$out" | grep "^stage  3 | \.    \.    \.    F0   B0   -    F1" >/dev/null || { echo "$out"; fail "1f1b timeline of stage 3"; }
echo "$out" | grep "step 33 ms; bubble 37.5% of the compute (formula 37.5%)" >/dev/null || { echo "$out"; fail "1f1b bubble"; }
echo "$out" | grep "held per stage at most: 4, 3, 2, 1" >/dev/null || fail "1f1b in-flight micro-batches"
"$BIN" schedule --pp 4 --micro-batches 8 --schedule gpipe | grep "(formula 37.5%).*at most: 8, 8, 8, 8" >/dev/null ||
  fail "gpipe bubble or memory"
"$BIN" schedule --pp 4 --micro-batches 8 --schedule interleaved --chunks 2 | grep "bubble 18.8% of the compute (formula 18.8%)" >/dev/null ||
  fail "interleaved bubble"
zb=$("$BIN" schedule --pp 4 --micro-batches 8 --schedule zb-h1)
python3 - "$zb" <<'PY' || fail "zb-h1 is not below 1f1b's bubble with 1f1b's first-stage memory"
import re, sys
m = re.search(r"bubble ([0-9.]+)% of the compute \(1F1B's formula, its bound, 37.5%\).*at most: ([0-9, ]+)$", sys.argv[1], re.M)
assert m, sys.argv[1]
assert float(m.group(1)) < 37.5, m.group(1)
assert all(int(x) <= 4 for x in m.group(2).split(", ")), m.group(2)
PY
echo "$zb" | grep "^stage  0 | F0   F1   F2   F3 " >/dev/null || fail "zb-h1 timeline"

# Instructions: sends and receives explicit, the step last.
"$BIN" schedule --pp 2 --micro-batches 2 --schedule gpipe --instructions >"$TMP/instr.txt"
grep -q "^rank 0 instructions: F0, send F0 -> 1, F1, send F1 -> 1, recv B1 <- 1, B1, recv B0 <- 1, B0, step$" "$TMP/instr.txt" ||
  grep -q "^rank 0 instructions: F0, send F0 -> 1, F1, send F1 -> 1, recv B0 <- 1, B0, recv B1 <- 1, B1, step$" "$TMP/instr.txt" ||
  { cat "$TMP/instr.txt"; fail "gpipe instructions of rank 0"; }
grep -q "^rank 1 instructions: recv F0 <- 0, F0, recv F1 <- 0, F1, B0, send B0 -> 0, B1, send B1 -> 0, step$" "$TMP/instr.txt" ||
  { cat "$TMP/instr.txt"; fail "gpipe instructions of rank 1"; }

# The trace: one complete slice per op, named per stage.
"$BIN" schedule --pp 2 --micro-batches 4 --schedule zb-h1 --trace "$TMP/trace.json" | grep "trace: $TMP/trace.json" >/dev/null ||
  fail "no trace line"
python3 - "$TMP/trace.json" <<'PY' || fail "trace contents"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
ops = [e for e in ev if e["ph"] == "X"]
assert len(ops) == 2 * 4 * 3, len(ops)  # per stage: 4 F, 4 b, 4 w
assert {e["args"]["name"] for e in ev if e["ph"] == "M"} == {"stage 0", "stage 1"}
for tid in (0, 1):
    mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in ops if e["tid"] == tid)
    # 1e-9 us: the trace's times are sums of floating-point op times.
    assert all(a[1] <= b[0] + 1e-9 for a, b in zip(mine, mine[1:])), "overlapping ops"
PY

# Bad shapes are named.
expect_error() {  # expect_error TEXT -- ARGS...
  local text=$1
  shift 2
  if "$@" >"$TMP/err.txt" 2>&1; then fail "accepted: $*"; fi
  grep -qF "$text" "$TMP/err.txt" || { cat "$TMP/err.txt"; fail "error does not say '$text'"; }
}
expect_error 'unknown pipeline schedule "pipedream": gpipe, 1f1b, interleaved or zb-h1' -- "$BIN" schedule --schedule pipedream
expect_error "1f1b runs one chunk per stage (got 2)" -- "$BIN" schedule --schedule 1f1b --chunks 2
expect_error "micro-batches (6) in whole rounds of the stages (4)" -- "$BIN" schedule --schedule interleaved --chunks 2 --micro-batches 6
expect_error "Value 0 not in range 1 to 4096" -- "$BIN" schedule --pp 0
echo "ok"
