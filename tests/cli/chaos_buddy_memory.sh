#!/usr/bin/env bash
# Recovery from buddies' memory (checkpoint.memory_every): 4 ranks on 2
# emulated nodes (MESHTRAIN_COMM_NODE_SIZE=2), each rank's in-memory shard
# also kept by a rank on the other node. Rank 1 is killed at step 7 and the
# elastic launcher restarts the job:
#  A. its node's memory survives (a process died): the restart resumes from
#     memory, with no checkpoint on disk at all (checkpoint.every = 0);
#  B. its node's memory is lost too (MESHTRAIN_TEST_LOSE_NODE_MEMORY=0, as a
#     replaced node): node 0 receives its ranks' shards and the index from
#     node 1's memory and resumes from there, still with nothing on disk;
#  C. both nodes' memory is lost (a rank and its buddy): it falls back to the
#     disk checkpoint of step 4.
# Every run ends bitwise equal to the uninterrupted one (deterministic mode),
# and a finished run leaves no in-memory copies behind.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 40000 >/dev/null
export MESHTRAIN_COMM_NODE_SIZE=2
ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set train.steps=12 --set train.warmup=2 --set train.lr=3e-3 --set train.eval_every=0
      --set train.threads=1 --set train.micro_batch=2 --set deterministic=true
      --set zero.stage=2 --set checkpoint.memory_every=2 --set checkpoint.memory_dir="$TMP/mem")

"$BIN" train "${ARGS[@]}" --nproc 4 --set checkpoint.dir="$TMP/ref_ckpt" \
  --set telemetry.dir="$TMP/ref" >"$TMP/log_ref" 2>&1 || { cat "$TMP/log_ref"; fail "reference run failed"; }
[ -z "$(ls -A "$TMP/mem")" ] || fail "a finished run left in-memory copies: $(ls -R "$TMP/mem")"
# The memory report counts the copies: what a node held per rank at the end against the
# prediction (its shard and a buddy's, two steps; the measured side adds the index and
# each rank's small state file).
copies=$(grep "in-memory checkpoint copies (node memory" "$TMP/log_ref") ||
  { cat "$TMP/log_ref"; fail "the memory report did not count the in-memory copies"; }
python3 - "$copies" <<'PY' || fail "the in-memory copies measured differ from the prediction: $copies"
import re, sys
m = re.search(r"predicted ([0-9.e+-]+) MB per rank .* for its 2 rank\(s\) at the end, ([0-9.e+-]+) MB per rank", sys.argv[1])
predicted, held = float(m[1]), float(m[2])
assert predicted <= held <= 1.5 * predicted, (predicted, held)
PY

# run NAME DISK_EVERY [LOSE_NODES]: rank 1 killed at step 7, one restart.
run() {
  local name=$1 every=$2 lose=${3:-}
  MESHTRAIN_TEST_KILL_AT_STEP=1:7 MESHTRAIN_TEST_LOSE_NODE_MEMORY=$lose \
    "$BIN" launch -n 4 --max-restarts 1 --no-prefix --restart-log "$TMP/$name/restarts.jsonl" -- \
    "$BIN" train "${ARGS[@]}" --set checkpoint.every="$every" --set checkpoint.dir="$TMP/${name}_ckpt" \
    --set telemetry.dir="$TMP/$name" >"$TMP/log_$name" 2>&1 ||
    { cat "$TMP/log_$name"; fail "run $name did not finish"; }
  grep '"event":"restart"' "$TMP/$name/restarts.jsonl" >/dev/null || fail "run $name: no restart happened"
  cmp -s "$TMP/$name/model.safetensors" "$TMP/ref/model.safetensors" ||
    fail "run $name: the restarted run's model differs from the uninterrupted run's"
  [ -z "$(ls -A "$TMP/mem")" ] || fail "run $name left in-memory copies: $(ls -R "$TMP/mem")"
}

# A memory directory that cannot be used is named, before any training.
rc=0
"$BIN" train "${ARGS[@]}" --nproc 2 --set checkpoint.memory_dir=/proc/no_such_dir \
  --set telemetry.dir="$TMP/bad" >"$TMP/log_bad" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "an unusable checkpoint.memory_dir was accepted"
grep 'checkpoint.memory_dir = "/proc/no_such_dir": cannot keep in-memory checkpoints' "$TMP/log_bad" >/dev/null ||
  { cat "$TMP/log_bad"; fail "the unusable memory directory was not named"; }

run A 0
grep -E 'resumed from in-memory copies of step [246];' "$TMP/log_A" >/dev/null ||
  { cat "$TMP/log_A"; fail "A: the restart did not resume from memory"; }
grep 'this node received 0 file' "$TMP/log_A" >/dev/null || fail "A: rank 0's node should have had every file"
[ ! -e "$TMP/A_ckpt" ] || [ -z "$(ls -A "$TMP/A_ckpt")" ] || fail "A: something was written to disk"

run B 0 0
grep 'MESHTRAIN_TEST_LOSE_NODE_MEMORY: node 0' "$TMP/log_B" >/dev/null || fail "B: node 0's memory was not dropped"
grep -E 'resumed from in-memory copies of step [246]; this node received 5 file\(s\)' "$TMP/log_B" >/dev/null ||
  { cat "$TMP/log_B"; fail "B: node 0 did not resume from its ranks' shards in node 1's memory"; }

run C 4 0,1
grep 'no in-memory checkpoint as new as the disk.s step 4 survives' "$TMP/log_C" >/dev/null ||
  { cat "$TMP/log_C"; fail "C: the fallback to disk was not reported"; }
grep -E "resumed from .*C_ckpt/step_00000004 at step 4" "$TMP/log_C" >/dev/null ||
  { cat "$TMP/log_C"; fail "C: the restart did not resume from the disk checkpoint of step 4"; }
echo ok
