#!/usr/bin/env bash
# `meshtrain report RUN_DIR` on a small metrics.jsonl: prints the breakdown
# table, writes report.svg (loss curve + time breakdown), merges per-rank
# traces, and refuses bad input with file:line and exit status 1 (2 for usage).
set -uo pipefail
BIN=$1
SRC=${2:-}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run="$tmp/run"
mkdir -p "$run"
for i in $(seq 1 40); do
  loss=$(awk -v i="$i" 'BEGIN { printf "%.4f", 1.5 + 3.0 * exp(-i / 10.0) }')
  val=""
  if [ $((i % 10)) -eq 0 ]; then
    val=$(awk -v i="$i" 'BEGIN { printf ",\"val_loss\":%.4f", 1.6 + 3.0 * exp(-i / 10.0) }')
  fi
  step_ms=50
  [ "$i" -eq 1 ] && step_ms=300
  echo "{\"step\":$i,\"loss\":$loss,\"lr\":0.0003,\"step_ms\":$step_ms,\"data_ms\":1,\"forward_ms\":15,\"backward_ms\":25,\"optimizer_ms\":4,\"comm_exposed_ms\":3,\"comm_total_ms\":12,\"tokens_per_s\":81920,\"tokens\":4096,\"samples\":4,\"devices\":2${val}}" >> "$run/metrics.jsonl"
done
echo '{"traceEvents":[{"name":"step","ph":"X","ts":1000,"dur":50,"pid":0,"tid":0}]}' > "$run/trace_rank0.json"
echo '{"traceEvents":[{"name":"step","ph":"X","ts":1010,"dur":55,"pid":1,"tid":0}]}' > "$run/trace_rank1.json"

out=$("$BIN" report "$run" --price-per-device-hour 2.5 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: report exited $rc"; fail=1; }
for want in "median ms" "% of step" "forward" "backward" "optimizer" "comm exposed" "other" \
            "comm total" "tokens/s" "per million tokens" "train loss" "val loss" "report.svg" \
            "merged 2 rank file"; do
  # A here-string, not `echo | grep -q`: grep -q exits at the first match and
  # echo can then die of SIGPIPE, which pipefail reports as a failure.
  grep -q -- "$want" <<<"$out" || { echo "FAIL: '$want' missing from the report"; fail=1; }
done
# forward: 15 ms of a 50 ms steady step = 30%.
echo "$out" | grep -E "^  forward +15.000 +15.000 +30.0%" >/dev/null \
  || { echo "FAIL: forward row is not 15 ms / 30%"; fail=1; }
svg="$run/report.svg"
[ -s "$svg" ] || { echo "FAIL: $svg not written"; fail=1; }
head -c 4 "$svg" | grep "<svg" >/dev/null || { echo "FAIL: $svg does not start with <svg"; fail=1; }
grep -q 'class="train-loss"' "$svg" || { echo "FAIL: no train loss line in the svg"; fail=1; }
grep -q 'class="val-loss"' "$svg" || { echo "FAIL: no val loss line in the svg"; fail=1; }
grep -q 'class="time-breakdown"' "$svg" || { echo "FAIL: no time breakdown in the svg"; fail=1; }
tail -c 8 "$svg" | grep "</svg>" >/dev/null || { echo "FAIL: svg not closed"; fail=1; }
if command -v python3 >/dev/null; then
  python3 -c "import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])" "$svg" \
    || { echo "FAIL: $svg is not well-formed XML"; fail=1; }
  python3 -c "import json, sys; j = json.load(open(sys.argv[1])); assert {e['pid'] for e in j['traceEvents'] if e['ph'] == 'X'} == {0, 1}" \
    "$run/trace.json" || { echo "FAIL: merged trace.json lacks both ranks"; fail=1; }
fi

# Bad input: exit 1 with the file and line; usage errors exit 2.
"$BIN" report "$tmp/missing" > "$tmp/o" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "does not exist" "$tmp/o" || { echo "FAIL: missing dir: rc $rc: $(cat "$tmp/o")"; fail=1; }
mkdir -p "$tmp/bad"
printf '{"step":1,"loss":2.0}\n{"step":2,"loss":\n' > "$tmp/bad/metrics.jsonl"
"$BIN" report "$tmp/bad" > "$tmp/o" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "metrics.jsonl:2:" "$tmp/o" || { echo "FAIL: malformed line: rc $rc: $(cat "$tmp/o")"; fail=1; }
: > "$tmp/bad/metrics.jsonl"
"$BIN" report "$tmp/bad" > "$tmp/o" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "no step records" "$tmp/o" || { echo "FAIL: empty metrics: rc $rc: $(cat "$tmp/o")"; fail=1; }
"$BIN" report > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: report without RUN_DIR exited $rc, expected 2"; fail=1; }
"$BIN" report "$run" --price-per-device-hour -1 > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: negative price exited $rc, expected 2"; fail=1; }
"$BIN" report --help > /dev/null 2>&1 || { echo "FAIL: report --help"; fail=1; }

[ $fail -eq 0 ] && echo PASS
exit $fail
