#!/usr/bin/env bash
# The whole mesh survives a dead rank: a dp 2 x tp 2 x pp 2 job (8 ranks,
# GPT with its tied wte on both stages) with deterministic mode and a
# checkpoint every 4 steps loses rank 5 (stage 1, tp 1 of replica 0) at
# step 7; the elastic launcher restarts it, it resumes from step 4 and ends
# with the same losses at every step and the same model file, bit for bit,
# as the uninterrupted run.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 40000 >/dev/null
ARGS=(--set model.preset=char-2L --set model.n_layer=4 --set model.vocab_size=256
      --set model.seq_len=32 --set data.train="$TMP/data/train_*.bin" --set train.steps=10
      --set train.warmup=2 --set train.lr=3e-3 --set train.eval_every=0 --set train.threads=1
      --set train.micro_batch=2 --set train.grad_accum=2 --set parallel.tp=2 --set parallel.pp=2
      --set deterministic=true --set checkpoint.every=4 --set checkpoint.keep_last=0
      --set checkpoint.resume=auto)
"$BIN" train "${ARGS[@]}" --nproc 8 --set telemetry.dir="$TMP/ref" >"$TMP/log_ref" 2>&1 ||
  { tail -20 "$TMP/log_ref"; fail "the uninterrupted run failed"; }
MESHTRAIN_TEST_KILL_AT_STEP=5:7 "$BIN" launch -n 8 --max-restarts 1 --no-prefix \
  --restart-log "$TMP/run/restarts.jsonl" -- "$BIN" train "${ARGS[@]}" \
  --set telemetry.dir="$TMP/run" >"$TMP/log_run" 2>&1 ||
  { tail -30 "$TMP/log_run"; fail "the killed run did not finish"; }
grep -q '"event":"restart"' "$TMP/run/restarts.jsonl" || fail "no restart happened"
grep -aq "resumed from .*step_00000004" "$TMP/log_run" || fail "the restart did not resume from step 4"
cmp -s "$TMP/run/model.safetensors" "$TMP/ref/model.safetensors" ||
  fail "the restarted run's model differs from the uninterrupted run's"
python3 - "$TMP/run/metrics.jsonl" "$TMP/ref/metrics.jsonl" <<'PY' || fail "losses differ"
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, filter(str.strip, open(p)))}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert a == b and len(a) == 10, [(s, a.get(s), b.get(s)) for s in b if a.get(s) != b[s]][:3]
PY
echo ok
