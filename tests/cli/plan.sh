#!/usr/bin/env bash
# `meshtrain plan` as a user runs it: a 100B GPT on 64 H100s prints ranked
# layouts with memory and time breakdowns, --json parses and agrees, a model
# that fits nowhere and an unknown model are clear errors (exit 1 / 2).
set -uo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail
"$BIN" plan --model gpt-100b --cluster h100-sxm --gpus 64 --global-batch 1536 --top 3 --explain \
  >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "plan failed"; }
grep -q "^model: gpt-100b" "$TMP/out" || fail "no model line"
grep -q "^#1 dp .* x tp .* x pp " "$TMP/out" || { cat "$TMP/out"; fail "no ranked layout"; }
grep -q "memory per GPU .* = params .* + grads .* + optimizer .* + activations" "$TMP/out" || fail "no memory breakdown"
grep -q "time per step: compute" "$TMP/out" || fail "no time breakdown"
grep -q "^why #1 over #2" "$TMP/out" || fail "no explanation"
"$BIN" plan --model gpt-100b --cluster h100-sxm --gpus 64 --global-batch 1536 --json >"$TMP/json" \
  || fail "plan --json failed"
python3 - "$TMP/json" <<'PY' || fail "plan --json is wrong"
import json, sys
j = json.load(open(sys.argv[1]))
rows = j["layouts"]
assert rows and j["fitting"] >= len(rows), j
for r in rows:
    assert r["dp"] * r["tp"] * r["pp"] == 64, r
    assert r["memory_gb"]["total"] <= 80 * 0.9 + 1e-9, r  # usable 90% of 80 GB; 1e-9 for bytes -> GB
tps = [r["tokens_per_s"] for r in rows]
# Fastest first: the planner sorts in 0.1% speed buckets (plan/planner.cpp),
# so a later row may be faster by less than 0.1%.
assert all(b <= a * 1.001 for a, b in zip(tps, tps[1:])), tps
PY
"$BIN" plan --model gpt-1t --cluster a100-40gb --gpus 8 --global-batch 64 >"$TMP/err" 2>&1 \
  && fail "a 1T model on 8 GPUs was planned"
grep -q "no layout of gpt-1t on 8 x a100-40gb fits 40 GB" "$TMP/err" || { cat "$TMP/err"; fail "unclear no-fit error"; }
"$BIN" plan --model gpt-9000 --gpus 8 --global-batch 8 >"$TMP/err" 2>&1
[ $? -eq 2 ] || fail "an unknown model is not a usage error"
grep -q "unknown model 'gpt-9000'" "$TMP/err" || fail "unclear unknown-model error"
echo "ok"
