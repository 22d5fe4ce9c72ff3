#!/usr/bin/env bash
# offload.optimizer_state = disk (optim/offloaded_optimizer.h) in real runs:
#  1. a 12.7M-parameter model (101 MB of AdamW state) trains bit-identically
#     with and without offload (losses and the saved model byte for byte);
#  2. the offloaded run's optimizer-state peak is the staging buffers, and
#     its process peak RSS is lower by at least 80% of the offloaded bytes
#     (the kernel's VmHWM; the allocator's categories as well);
#  3. memory.limit_mb between the two predictions refuses the in-memory run
#     and trains the offloaded one;
#  4. killed after a checkpoint and resumed, the offloaded run continues bit
#     for bit (state() read for the save, refilled on resume), and so does
#     the same checkpoint resumed in memory;
#  5. ZeRO-2 on 2 ranks with offload equals ZeRO-2 without;
#  6. clear errors: an unknown tier, a missing directory, LAMB under ZeRO.
# deterministic = true: GEMMs pinned to one backend (the auto choice times both,
# and a loaded machine may pick differently between two runs).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail
source "$(dirname "$0")/lib/losses.sh"  # same_losses

"$BIN" data synth --out "$TMP/data" --tokens 20000 >/dev/null
BIG=(--set model.preset=char-2L --set model.n_embd=512 --set model.n_layer=4 --set model.n_head=8
     --set model.vocab_size=256 --set model.seq_len=32 --set data.train="$TMP/data/train_*.bin"
     --set train.steps=4 --set train.warmup=1 --set train.schedule=constant --set train.eval_every=0
     --set train.threads=1 --set train.micro_batch=1 --set deterministic=true)
OFF=(--set offload.optimizer_state=disk --set offload.path="$TMP" --set offload.unit_mb=8)

run() {  # run NAME ARGS...: trains into $TMP/NAME, log in $TMP/log_NAME
  local name=$1; shift
  "$BIN" train "$@" --set telemetry.dir="$TMP/$name" >"$TMP/log_$name" 2>&1 ||
    { cat "$TMP/log_$name"; fail "run $name failed"; }
}

# 1. Bit-identical.
run mem "${BIG[@]}"
run off "${BIG[@]}" "${OFF[@]}"
same_losses "$TMP/off/metrics.jsonl" "$TMP/mem/metrics.jsonl" 1 0 4 || fail "offloaded losses differ"
cmp -s "$TMP/off/model.safetensors" "$TMP/mem/model.safetensors" || fail "offloaded model differs"
grep "optimizer state offloaded to disk" "$TMP/log_off" || { cat "$TMP/log_off"; fail "no offload line"; }
grep -q "optimizer state offloaded" "$TMP/log_mem" && fail "the in-memory run reported an offload"

# 2. Resident memory: the allocator's optimizer-state peak and the process's RSS.
python3 - "$TMP/log_mem" "$TMP/log_off" "$TMP/mem/memory.json" "$TMP/off/memory.json" <<'PY' || fail "offload did not lower resident memory"
import json, re, sys
def rss(log):
    return float(re.search(r"process peak RSS ([0-9.]+) MB", open(log).read()).group(1))
mem, off = (json.load(open(p))[0] for p in sys.argv[3:5])
offloaded = off["predicted"]["offloaded"] / 1e6
staging = off["predicted"]["optimizer"] / 1e6
opt_mem, opt_off = mem["peak"]["optimizer"] / 1e6, off["peak"]["optimizer"] / 1e6
r_mem, r_off = rss(sys.argv[1]), rss(sys.argv[2])
print(f"optimizer state peak: in memory {opt_mem:.1f} MB, offloaded {opt_off:.1f} MB "
      f"(staging predicted {staging:.1f} MB); offloaded {offloaded:.1f} MB; "
      f"peak RSS {r_mem:.1f} -> {r_off:.1f} MB")
assert offloaded > 100, offloaded
assert opt_off <= staging + 0.01, (opt_off, staging)
assert opt_mem - opt_off >= offloaded - staging - 0.5, (opt_mem, opt_off)
assert r_mem - r_off >= 0.8 * (offloaded - staging), (r_mem, r_off)
PY

# 3. A limit between the two predictions: in memory refused, offloaded trains.
limit=$(python3 - "$TMP/mem/memory.json" "$TMP/off/memory.json" <<'PY'
import json, sys
a, b = (json.load(open(p))[0]["predicted"]["training_total"] for p in sys.argv[1:3])
print(f"{(a + b) / 2 / 1e6:.1f}")
PY
)
if "$BIN" train "${BIG[@]}" --set memory.limit_mb="$limit" --set telemetry.dir="$TMP/lim0" >"$TMP/log_lim0" 2>&1; then
  fail "the in-memory run was not refused under memory.limit_mb=$limit"
fi
grep -q "more than memory.limit_mb = $limit" "$TMP/log_lim0" || { cat "$TMP/log_lim0"; fail "no limit message"; }
run lim1 "${BIG[@]}" "${OFF[@]}" --set memory.limit_mb="$limit"

# 4. Checkpoint, kill, resume (bit for bit the uninterrupted offloaded run).
CK=(--set checkpoint.every=2 --set checkpoint.keep_last=0)
rc=0
MESHTRAIN_TEST_CRASH_AFTER_STEP=2 "$BIN" train "${BIG[@]}" "${OFF[@]}" "${CK[@]}" \
  --set telemetry.dir="$TMP/res" >"$TMP/log_res1" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "the interrupted run should fail"
run res "${BIG[@]}" "${OFF[@]}" "${CK[@]}" --set checkpoint.resume=auto
grep -q "resumed from .*step_00000002 at step 2" "$TMP/log_res" || { cat "$TMP/log_res"; fail "did not resume"; }
same_losses "$TMP/res/metrics.jsonl" "$TMP/off/metrics.jsonl" 3 0 4 || fail "resumed losses differ"
cmp -s "$TMP/res/model.safetensors" "$TMP/off/model.safetensors" || fail "resumed model differs"
# The same checkpoint resumed in memory: offload is where the state lives, not another optimizer.
run resmem "${BIG[@]}" "${CK[@]}" --set checkpoint.resume="$TMP/res/ckpt/step_00000002"
same_losses "$TMP/resmem/metrics.jsonl" "$TMP/off/metrics.jsonl" 3 0 4 || fail "in-memory resume differs"
cmp -s "$TMP/resmem/model.safetensors" "$TMP/off/model.safetensors" || fail "in-memory resumed model differs"

# 5. ZeRO-2 on 2 ranks, each rank's range offloaded.
SMALL=(--set model.preset=char-2L --set model.vocab_size=256 --set model.seq_len=32
       --set data.train="$TMP/data/train_*.bin" --set train.steps=3 --set train.warmup=1
       --set train.eval_every=0 --set train.threads=1 --set train.micro_batch=2 --set zero.stage=2 --set deterministic=true --nproc 2)
run z "${SMALL[@]}"
run zoff "${SMALL[@]}" "${OFF[@]}" --set offload.unit_mb=0.5
same_losses "$TMP/zoff/metrics.jsonl" "$TMP/z/metrics.jsonl" 1 0 3 || fail "ZeRO-2 offloaded losses differ"
cmp -s "$TMP/zoff/model.safetensors" "$TMP/z/model.safetensors" || fail "ZeRO-2 offloaded model differs"

# 6. Errors.
expect_error() {  # expect_error TEXT ARGS...
  local want=$1; shift
  if "$BIN" train "$@" --set telemetry.dir="$TMP/bad" >"$TMP/log_bad" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$want" "$TMP/log_bad" || { cat "$TMP/log_bad"; fail "no '$want' in the error"; }
  grep -q "Segmentation\|Aborted\|terminate called" "$TMP/log_bad" && fail "crashed: $*"
  return 0
}
expect_error "offload.optimizer_state" "${SMALL[@]}" --set offload.optimizer_state=nvme
expect_error "offload.path = \"$TMP/nowhere\"" "${SMALL[@]}" "${OFF[@]}" --set offload.path="$TMP/nowhere"
expect_error "under ZeRO or tensor parallelism is not available" "${SMALL[@]}" "${OFF[@]}" \
  --set train.optimizer=lamb
echo "ok"
