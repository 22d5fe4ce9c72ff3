#!/usr/bin/env bash
# Data-parallel training as a user runs it: `train --nproc 2` end to end (only
# rank 0 reports), `bench train --nproc 2`, and a rank killed mid-training
# stopping the whole job with its name instead of hanging.
set -euo pipefail
BIN=$1
TMP=$(mktemp -d)
JOB=""
cleanup() { [ -n "$JOB" ] && kill "$JOB" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$BIN" data synth --out "$TMP/data" --tokens 60000 >/dev/null
ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set data.val="$TMP/data/val_*.bin" --set train.warmup=2 --set train.lr=3e-3
      --set train.eval_every=5 --set train.eval_batches=2 --set train.threads=1)

"$BIN" train "${ARGS[@]}" --set train.steps=10 --set train.micro_batch=2 --nproc 2 \
  --set train.lr_scaling=linear --set train.lr_base_batch=2 \
  --set telemetry.dir="$TMP/run" >"$TMP/log" 2>&1 || { cat "$TMP/log"; fail "train --nproc 2 failed"; }
grep -q "2 x 16 tokens x 2 rank(s) x 1 accumulation = 4 sequences" "$TMP/log" || fail "no effective batch line"
grep -q "lr: 0.003 scaled linear for global batch 4 (tuned at 2) = 0.006" "$TMP/log" || fail "no lr scaling line"
[ "$(grep -c '^done:' "$TMP/log")" -eq 1 ] || fail "expected one 'done:' line (rank 0 only)"
[ "$(grep -c '^resolved configuration' "$TMP/log")" -eq 1 ] || fail "configuration printed more than once"
test -s "$TMP/run/model.safetensors" || fail "no model file"
[ "$(wc -l <"$TMP/run/metrics.jsonl")" -eq 10 ] || fail "metrics.jsonl should have 10 lines"
grep -q '"comm_exposed_ms"' "$TMP/run/metrics.jsonl" || fail "no communication metrics"

out=$("$BIN" bench train --preset tiny --batch 2 --steps 3 --warmup 1 --threads 1 --nproc 2 --json)
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "bench train --nproc 2 should print one row: $out"
echo "$out" | grep '"nproc":2' >/dev/null || fail "bench row lacks nproc: $out"
echo "$out" | grep '"comm_total_ms"' >/dev/null || fail "bench row lacks comm time: $out"

# Kill one rank of a long run: the launcher names it and the job ends.
"$BIN" train "${ARGS[@]}" --set train.steps=1000000 --set train.eval_every=0 --nproc 3 \
  --set telemetry.dir="$TMP/run2" >"$TMP/log2" 2>&1 &
JOB=$!
for _ in $(seq 100); do [ -s "$TMP/run2/metrics.jsonl" ] && break; sleep 0.1; done
victim=$(pgrep -P "$JOB" | sed -n 2p)
[ -n "$victim" ] || { cat "$TMP/log2"; fail "no rank processes found"; }
kill -9 "$victim"
start=$SECONDS
rc=0; wait "$JOB" || rc=$?
JOB=""
[ "$rc" -eq 1 ] || { cat "$TMP/log2"; fail "job exited $rc after a rank was killed"; }
[ $((SECONDS - start)) -lt 30 ] || fail "job took too long to stop"
grep -q "was killed by signal 9" "$TMP/log2" || { tail "$TMP/log2"; fail "killed rank not named"; }
echo "ok"
