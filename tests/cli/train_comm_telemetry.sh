#!/usr/bin/env bash
# Every gradient-sync strategy reports its communication the same way: on 2
# ranks, replicated data parallelism and ZeRO stages 1, 2 and 3 each write
# comm_total_ms >= comm_exposed_ms > 0 on every step of metrics.jsonl (the
# total is the time the reductions ran, the exposed part what training
# waited for). Data parallelism alone has no tensor-parallel part
# (comm_tp_ms 0); at dp 2 x tp 2 the tp collectives are counted as exposed
# communication (total >= exposed >= tp > 0) and drawn in the trace, the
# overlapped ones (backward's input-gradient sums) as their waits.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail
"$BIN" data synth --out "$TMP/data" --tokens 40000 >/dev/null
for stage in 0 1 2 3; do
  "$BIN" train --set model.preset=tiny --set model.vocab_size=256 \
    --set data.train="$TMP/data/train_*.bin" --set train.steps=3 --set train.micro_batch=2 \
    --set train.eval_every=0 --set train.threads=1 --set zero.stage=$stage \
    --set zero.persist_threshold=0 --set telemetry.dir="$TMP/run$stage" \
    --nproc 2 >"$TMP/log$stage" 2>&1 || { cat "$TMP/log$stage"; fail "zero.stage=$stage failed"; }
  python3 - "$TMP/run$stage/metrics.jsonl" "$stage" <<'PY' || fail "zero.stage=$stage communication"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(rows) == 3, len(rows)
for r in rows:
    t, e = r["comm_total_ms"], r["comm_exposed_ms"]
    assert t >= e > 0, ("stage", sys.argv[2], "step", r["step"], "total", t, "exposed", e)
    assert r["comm_tp_ms"] == 0, r
print("stage %s: total %.3f ms >= exposed %.3f ms" % (sys.argv[2], rows[-1]["comm_total_ms"], rows[-1]["comm_exposed_ms"]))
PY
done
# With accumulation (ZeRO-2 reduces every micro-batch) the timing still
# describes the last backward: its first reduction starts after it began.
"$BIN" train --set model.preset=tiny --set model.vocab_size=256 \
  --set data.train="$TMP/data/train_*.bin" --set train.steps=3 --set train.micro_batch=1 \
  --set train.grad_accum=2 --set train.eval_every=0 --set train.threads=1 --set zero.stage=2 \
  --set telemetry.dir="$TMP/runacc" --nproc 2 >"$TMP/logacc" 2>&1 || { cat "$TMP/logacc"; fail "accumulating run failed"; }
python3 - "$TMP/runacc/metrics.jsonl" <<'PY' || fail "zero.stage=2 with accumulation: first launch"
import json, sys
for r in (json.loads(l) for l in open(sys.argv[1]) if l.strip()):
    assert r["comm_first_launch_ms"] >= 0, r
    assert r["comm_total_ms"] >= r["comm_exposed_ms"] > 0, r
PY
# dp 2 x tp 2 (llama-tiny), ZeRO-1 over dp, traced.
"$BIN" train --set model.preset=llama-tiny --set model.ffn_hidden=38 --set model.vocab_size=256 \
  --set data.train="$TMP/data/train_*.bin" --set train.steps=3 --set train.micro_batch=2 \
  --set train.eval_every=0 --set train.threads=1 --set zero.stage=1 --set parallel.tp=2 \
  --set telemetry.trace=true --set telemetry.dir="$TMP/runtp" --nproc 4 >"$TMP/logtp" 2>&1 \
  || { cat "$TMP/logtp"; fail "dp 2 x tp 2 run failed"; }
grep -q "of it tp" "$TMP/logtp" || { cat "$TMP/logtp"; fail "the step table does not split tp"; }
python3 - "$TMP/runtp" <<'PY' || fail "dp 2 x tp 2: tensor-parallel communication"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if l.strip()]
assert len(rows) == 3, len(rows)
for r in rows:
    assert r["comm_total_ms"] >= r["comm_exposed_ms"] >= r["comm_tp_ms"] > 0, r
t = json.load(open(sys.argv[1] + "/trace.json"))
events = t["traceEvents"] if isinstance(t, dict) else t
names = {e.get("name") for e in events if e.get("cat") == "comm"}
assert "tp allreduce" in names, sorted(n for n in names if n)
# Backward's input-gradient sums run beside the weight-gradient GEMMs: only their waits show.
assert "tp allreduce wait" in names, sorted(n for n in names if n)
PY
echo "ok"
