#!/usr/bin/env bash
# `recompute` end to end: the tiny model trained 5 steps (with gradient
# accumulation and an evaluation) under full, every:2 and selective
# recomputation gives bitwise the same losses and the same final model as
# recompute = none, also data-parallel on 2 ranks; `bench train --recompute`
# measures exactly the predicted activation bytes, shrinking with the mode.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 30000 >/dev/null
train() {  # $1 = recompute mode, $2 = run dir
  "$BIN" train --set model.preset=tiny --set model.vocab_size=256 \
    --set data.train="$TMP/data/train_*.bin" --set data.val="$TMP/data/val_*.bin" \
    --set train.steps=5 --set train.micro_batch=3 --set train.grad_accum=2 --set train.warmup=2 \
    --set train.lr=3e-3 --set train.eval_every=3 --set train.eval_batches=2 --set train.threads=1 \
    --set recompute="$1" --set telemetry.dir="$2" --trace >"$2.log" 2>&1 \
    || { cat "$2.log"; fail "train with recompute=$1 failed"; }
}
train none "$TMP/none"
# The trace shows what backward re-ran: 5 steps x 2 micro-batches; block 1 (the
# last) is never re-run, the scratch slot still holds it from forward.
recomputes() { grep -o "\"name\":\"recompute $1\"" "$2/trace.json" | wc -l; }
[ "$(grep -c '"name":"recompute' "$TMP/none/trace.json")" -eq 0 ] || fail "recompute=none re-ran something"
for mode in full every:2 selective; do
  dir="$TMP/${mode/:/_}"
  train "$mode" "$dir"
  grep -q "\"recompute\": \"$mode\"" "$dir.log" || fail "resolved config does not show recompute=$mode"
  python3 - "$TMP/none" "$dir" "$mode" <<'PY' || fail "recompute=$mode differs from none"
import json, sys
base, run, mode = sys.argv[1:]
def rows(d):
    return [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()]
a, b = rows(base), rows(run)
assert len(a) == len(b) == 5, (len(a), len(b))
for ra, rb in zip(a, b):
    # JSON floats round-trip, so equal values mean bitwise-equal f32 losses.
    for k in ("loss", "val_loss", "grad_norm"):
        assert ra.get(k) == rb.get(k), (mode, ra["step"], k, ra.get(k), rb.get(k))
PY
  cmp -s "$TMP/none/model.safetensors" "$dir/model.safetensors" || fail "recompute=$mode: final model differs"
done
[ "$(recomputes "layer 0" "$TMP/full")" -eq 10 ] || fail "recompute=full: expected 10 re-runs of block 0"
[ "$(recomputes "attention 0" "$TMP/selective")" -eq 10 ] || fail "recompute=selective: expected 10 attention re-runs"

# With data parallelism (2 ranks): full recompute = none, bitwise.
for mode in none full; do
  "$BIN" train --set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin" \
    --set train.steps=3 --set train.micro_batch=2 --set train.eval_every=0 --set train.threads=1 \
    --set recompute=$mode --set telemetry.dir="$TMP/dp_$mode" --nproc 2 >"$TMP/dp_$mode.log" 2>&1 \
    || { cat "$TMP/dp_$mode.log"; fail "train --nproc 2 with recompute=$mode failed"; }
done
python3 - "$TMP" <<'PY' || fail "data-parallel recompute=full differs from none"
import json, sys
loss = lambda d: [json.loads(l)["loss"] for l in open(f"{sys.argv[1]}/{d}/metrics.jsonl") if l.strip()]
assert len(loss("dp_none")) == 3 and loss("dp_none") == loss("dp_full"), (loss("dp_none"), loss("dp_full"))
PY
cmp -s "$TMP/dp_none/model.safetensors" "$TMP/dp_full/model.safetensors" || fail "data parallel: final model differs"

# `bench train --recompute`: the allocator's activation peak equals the
# prediction and shrinks none > every:3 > every:2 > full (6 layers: blocks
# 0,3 / 0,2,4 / all recomputed, one block's worth kept as scratch).
for mode in none every:3 every:2 full; do
  "$BIN" bench train --preset char-6L --batch 1 --seq 32 --steps 1 --warmup 0 --threads 1 --recompute "$mode" \
    --json >"$TMP/bench_${mode/:/_}.json" || fail "bench train --recompute $mode failed"
done
python3 - "$TMP" <<'PY' || fail "bench train activation memory check failed"
import json, sys
r = {m: json.loads(open(f"{sys.argv[1]}/bench_{m}.json").read().splitlines()[-1])
     for m in ("none", "every_3", "every_2", "full")}
for m, j in r.items():
    assert j["activations_allocator_peak_mb"] == j["activations_predicted_mb"], (m, j)
assert r["none"]["recompute"] == "none" and r["full"]["recompute"] == "full"
a = [r[m]["activations_allocator_peak_mb"] for m in ("none", "every_3", "every_2", "full")]
assert a[0] > a[1] > a[2] > a[3], a
PY
echo "ok"
