#!/usr/bin/env bash
# memory.limit_mb: a configuration predicted above the per-rank limit is
# refused before training, with the predicted bytes per category and what
# each ZeRO stage would need; the stage it names as fitting then trains and
# prints the per-rank memory report (measured peaks next to the formulas).
# The limit also covers the end of the run: ZeRO gathers the other ranks'
# parameters onto rank 0 to save the model (4.9 MB here), which the
# prediction of rank 0's end of run counts and the measured peak respects.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 20000 >/dev/null
# char-2L widened to 8 layers: 1.6M parameters, 26 MB of fp32 model states with AdamW.
ARGS=(--set model.preset=char-2L --set model.n_layer=8 --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set train.steps=2 --set train.warmup=1 --set train.eval_every=0 --set train.threads=1
      --set train.micro_batch=1 --set model.seq_len=32 --nproc 4)

# Stage 0 on 4 ranks needs every byte of the model states per rank.
if "$BIN" train "${ARGS[@]}" --set memory.limit_mb=15.8 --set telemetry.dir="$TMP/r0" >"$TMP/log0" 2>&1; then
  fail "stage 0 was not refused under memory.limit_mb=15.8"
fi
cat "$TMP/log0"
grep -q "more than memory.limit_mb = 15.8" "$TMP/log0" || fail "no limit in the message"
grep -q "per ZeRO stage on 4 ranks: stage 0 " "$TMP/log0" || fail "no per-stage numbers"
grep -q "zero.stage = 3 would fit" "$TMP/log0" || fail "no stage suggested"
grep -q "parameters .* + gradients .* + optimizer" "$TMP/log0" || fail "no per-category numbers"
[ ! -e "$TMP/r0/metrics.jsonl" ] || fail "a refused configuration trained"

# Stage 3, as suggested, fits and trains; the report shows every rank.
"$BIN" train "${ARGS[@]}" --set memory.limit_mb=15.8 --set zero.stage=3 --set zero.persist_threshold=0 \
  --set telemetry.dir="$TMP/r3" >"$TMP/log3" 2>&1 || { cat "$TMP/log3"; fail "stage 3 did not train"; }
grep -q "ZeRO stage 3: 4 ranks" "$TMP/log3" || fail "no ZeRO line"
grep -E -q "^model states +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$TMP/log3" || {
  cat "$TMP/log3"; fail "no per-rank model-state row"; }
line=$(grep "allocator peak .* over the whole run" "$TMP/log3") || fail "no whole-run peak"
echo "$line"
python3 - "$line" <<'PY' || fail "the whole run exceeded the predicted end of run, or the limit"
import re, sys
line = sys.argv[1]
peak = float(re.search(r"allocator peak ([0-9.]+) MB over the whole run", line).group(1))
end = float(re.search(r"end of run with the saved model's copy predicted ([0-9.]+) MB", line).group(1))
print(f"rank 0: whole-run peak {peak} MB, predicted end of run {end} MB, limit 15.8 MB")
assert peak <= end <= 15.8, (peak, end)
PY
# memory.json: rank 0 grows by the gather and stays under its predicted end
# of run; the other ranks send their pieces and do not grow at all.
python3 - "$TMP/r3/memory.json" <<'PY' || fail "the save grew a rank it should not have"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 4, rows
for r in rows:
    train, run, end = r["training_peak_total"], r["run_peak_total"], r["predicted"]["end_of_run_total"]
    print(f"rank {r['rank']}: training peak {train / 1e6:.2f} MB, whole run {run / 1e6:.2f} MB, "
          f"predicted end of run {end / 1e6:.2f} MB")
    if r["rank"] == 0:
        assert train < run <= end, r
    else:
        assert run == train, r
PY
echo "ok"
