#!/usr/bin/env bash
# More chaos with real processes, files and signals (docs/FAULT_TOLERANCE.md),
# each compared with an uninterrupted 3-rank deterministic reference run:
#  3. a rank that stops (SIGSTOP) is caught by its missing heartbeat, the job
#     restarts and ends bitwise equal;
#  4. a rank killed after writing its shard but before the index: the job
#     fails, `ckpt inspect` reports the torn checkpoint incomplete, latest
#     still names the previous one, and a resumed run skips the torn one;
#  5. a slot that keeps failing is dropped (--min-nproc): the job continues
#     on 2 ranks (same global batch) and finishes.
set -euo pipefail
source "$(dirname "$0")/lib/chaos_common.sh"  # BIN, TMP, ARGS, checks, reference run

# 3. A hung rank (SIGSTOP): no heartbeat for 3 s -> stopped and restarted.
d="$TMP/hang"
MESHTRAIN_TEST_HANG_AT_STEP=2:11 "$BIN" train "${ARGS[@]}" --nproc $NP --max-restarts 2 \
  --heartbeat-timeout 3 --grace 1 --set telemetry.dir="$d" >"$d.log" 2>&1 ||
  { cat "$d.log"; fail "job with a hung rank failed"; }
ev=$(events "$d/restarts.jsonl")
grep -qx "restart:heartbeat:2:$NP" <<<"$ev" || { cat "$d.log"; fail "hang not logged as a heartbeat timeout of rank 2: $ev"; }
grep -q "rank 2 stopped making progress: no heartbeat for" "$d.log" || fail "no heartbeat message"
same_losses_30 "$d/metrics.jsonl" "$TMP/ref/metrics.jsonl" 1 0 || fail "hang: losses differ"
cmp -s "$d/model.safetensors" "$TMP/ref/model.safetensors" || fail "hang: final model differs"
no_leaks "$d/restarts.jsonl"

# 4. Killed between its shard file and the index of step 12.
d="$TMP/torn"
rc=0
MESHTRAIN_TEST_KILL_IN_SAVE=1:12 "$BIN" train "${ARGS[@]}" --nproc $NP --set telemetry.dir="$d" \
  >"$d.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "a rank killed in a save should fail the job"
grep -q "rank 1 was killed by signal 9" "$d.log" || { cat "$d.log"; fail "kill in save not reported"; }
test -f "$d/ckpt/step_00000012/shard_1_of_3.safetensors" || fail "rank 1 did not write its step-12 shard"
test ! -e "$d/ckpt/step_00000012/index.json" || fail "torn checkpoint has an index"
grep -qx step_00000008 "$d/ckpt/latest" || fail "latest moved to a torn checkpoint: $(cat "$d/ckpt/latest")"
out=$("$BIN" ckpt inspect "$d/ckpt" 2>&1) && fail "inspect of a root with a torn checkpoint exited 0"
grep -Eq "^ +12 +incomplete" <<<"$out" || fail "torn step 12 not reported incomplete: $out"
grep -Eq "^ +8 +complete" <<<"$out" || fail "step 8 not complete: $out"
"$BIN" ckpt inspect "$d/ckpt/step_00000008" >/dev/null || fail "previous checkpoint no longer loads"
"$BIN" train "${ARGS[@]}" --nproc $NP --set telemetry.dir="$d" >"$d.log2" 2>&1 ||
  { cat "$d.log2"; fail "resume after a torn save failed"; }
grep -q "not resuming from .*step_00000012: .*no index.json" "$d.log2" || { cat "$d.log2"; fail "torn checkpoint not skipped with a reason"; }
grep -q "resumed from .*step_00000008 at step 8" "$d.log2" || fail "did not resume from step 8"
same_losses_30 "$d/metrics.jsonl" "$TMP/ref/metrics.jsonl" 1 0 || fail "torn: losses differ"
cmp -s "$d/model.safetensors" "$TMP/ref/model.safetensors" || fail "torn: final model differs"
ls "$d/ckpt/step_00000012" | grep "\.tmp\." >/dev/null && fail "temporary shard files left behind"

# 5. Slot 2 keeps failing (killed at step 10, then broken): continue on 2
# ranks with micro_batch 3, the same global batch of 6 sequences.
d="$TMP/shrink"
MESHTRAIN_TEST_KILL_AT_STEP=2:10 "$BIN" launch -n $NP --max-restarts 3 --min-nproc 2 --no-prefix \
  --restart-log "$d/restarts.jsonl" -- bash -c '
    if [ "$MESHTRAIN_WORLD_SIZE" = 3 ] && [ "$MESHTRAIN_RANK" = 2 ] && [ "$MESHTRAIN_RESTART_COUNT" -ge 1 ]; then
      echo "slot 2 is broken" >&2; exit 1
    fi
    exec "$0" train "$@" --set train.micro_batch=$((6 / MESHTRAIN_WORLD_SIZE))' \
  "$BIN" "${ARGS[@]}" --set telemetry.dir="$d" >"$d.log" 2>&1 || { cat "$d.log"; fail "shrinking job failed"; }
ev=$(events "$d/restarts.jsonl")
[ "$(grep -c '^restart:' <<<"$ev")" = 2 ] || fail "expected 2 restarts: $ev"
grep -qx "restart:signal:2:3" <<<"$ev" || fail "first failure not logged: $ev"
grep -qx "restart:exit:2:2" <<<"$ev" || fail "the slot was not dropped: $ev"
grep -qx "finished:::2" <<<"$ev" || fail "did not finish on 2 ranks: $ev"
# Which checkpoint the 2-rank attempt finds depends on how far the 3-rank
# writers got (async saves); it resumes from it or, with none, starts over.
grep -Eq "resumed from .*step_000000(04|08) at step|no checkpoint to resume from" "$d.log" ||
  { cat "$d.log"; fail "2-rank attempt neither resumed nor started over"; }
grep -q "batch: 3 x 16 tokens x 2 rank(s)" "$d.log" || fail "no 2-rank attempt"
grep -q "global batch changed" "$d.log" && fail "same global batch reported as changed"
# 2 ranks x 3 sequences against 3 x 2: the same global batch, reduced in
# another f32 order, so the data-parallel equivalence bound 1e-5
# (tests/unit/dp_harness.h; was 1e-4). Measured 1.1e-7.
same_losses_30 "$d/metrics.jsonl" "$TMP/ref/metrics.jsonl" 1 1e-5 || fail "shrunk run diverged"
no_leaks "$d/restarts.jsonl"
echo ok
