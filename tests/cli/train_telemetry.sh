#!/usr/bin/env bash
# Telemetry of a real data-parallel run: `train --nproc 2 --trace` with a price
# writes metrics.jsonl whose parts add up to each step, TensorBoard events, a
# merged trace.json with both ranks' layer and bucket-allreduce events, prints
# the end-of-run summary, and `meshtrain report` reads the run.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 60000 >/dev/null
"$BIN" train --set model.preset=tiny --set model.vocab_size=256 \
  --set data.train="$TMP/data/train_*.bin" --set data.val="$TMP/data/val_*.bin" \
  --set train.steps=6 --set train.micro_batch=2 --set train.warmup=2 --set train.lr=3e-3 \
  --set train.eval_every=3 --set train.eval_batches=2 --set train.threads=1 \
  --set parallel.bucket_mb=0.02 --set parallel.first_bucket_mb=0.01 \
  --set telemetry.price_per_device_hour=2.5 --set telemetry.dir="$TMP/run" \
  --nproc 2 --trace >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "train --nproc 2 --trace failed"; }

# The end-of-run summary, once (rank 0).
grep -q "time per step" "$TMP/log" || { cat "$TMP/log"; fail "no end-of-run summary"; }
[ "$(grep -c '^done:' "$TMP/log")" -eq 1 ] || fail "expected one 'done:' line"
grep -q "trace: .*trace.json (2 rank file(s)" "$TMP/log" || { cat "$TMP/log"; fail "no trace line"; }

python3 - "$TMP/run" <<'PY' || fail "metrics/trace check failed"
import json, sys, os
run = sys.argv[1]
recs = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()]
assert [r["step"] for r in recs] == list(range(1, 7)), [r["step"] for r in recs]
need = ["step", "loss", "lr", "grad_norm", "step_ms", "data_ms", "forward_ms", "backward_ms",
        "optimizer_ms", "tokens_per_s", "comm_exposed_ms", "comm_total_ms", "comm_buckets",
        "comm_first_launch_ms", "last_backward_ms", "skipped", "mfu", "usd_per_million_tokens",
        "straggler", "other_ms"]
for r in recs:
    for k in need:
        assert k in r, (k, r)
    parts = r["data_ms"] + r["forward_ms"] + r["backward_ms"] + r["optimizer_ms"] + r["comm_exposed_ms"]
    tol = 0.01 * r["step_ms"] + 0.05  # kBreakdownRelTol, kBreakdownAbsTolS (ms)
    assert parts <= r["step_ms"] + tol, ("parts exceed the step", parts, r)
    # other_ms is step_ms minus the parts, in double: equal to a few
    # roundings (~1e-16 relative); 1e-6 is slack.
    assert abs(r["step_ms"] - parts - r["other_ms"]) < 1e-6 * max(1, r["step_ms"]), r
    assert r["straggler"]["ranks"] == 2, r
    assert r["usd_per_million_tokens"] > 0 and 0 < r["mfu"] < 1, r
assert any("val_loss" in r for r in recs)
tr = json.load(open(os.path.join(run, "trace.json")))
ev = [e for e in tr["traceEvents"] if e.get("ph") == "X"]
pids = {e["pid"] for e in ev}
assert pids == {0, 1}, pids
for pid in (0, 1):
    names = {e["name"] for e in ev if e["pid"] == pid}
    assert "forward layer 0" in names and "backward layer 0" in names, names
    assert "optimizer" in names and "data wait" in names, names
    buckets = [e for e in ev if e["pid"] == pid and e["name"].startswith("allreduce bucket")]
    assert buckets, names
    a = buckets[0]["args"]
    assert a["bytes"] > 0 and a["algorithm"], a
print("ok: %d records, %d trace events" % (len(recs), len(ev)))
PY

ls "$TMP/run"/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard events file"
# (TensorBoard's own reader: telemetry.tensorboard_python_reader_loads_events,
# skipped where the tensorboard package is missing.)

"$BIN" report "$TMP/run" >"$TMP/report" 2>&1 || { cat "$TMP/report"; fail "report failed"; }
test -s "$TMP/run/report.svg" || fail "report wrote no report.svg"
grep -q "forward" "$TMP/report" || { cat "$TMP/report"; fail "report has no breakdown"; }
echo "ok"
