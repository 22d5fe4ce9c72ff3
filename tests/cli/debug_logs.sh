#!/usr/bin/env bash
# Logs in the NCCL_DEBUG habit and the flight records on demand:
#  1. MESHTRAIN_DEBUG=INFO with MESHTRAIN_DEBUG_SUBSYS=INIT,ALGO and
#     MESHTRAIN_DEBUG_FILE=.../log.%r on 2 ranks: one file per rank, INIT
#     lines naming the rank, ALGO lines with the chosen algorithm and the
#     alpha-beta model's times, nothing of the parts left out (CKPT, DATA),
#     and a training log that is unchanged;
#  2. ^ALGO: every part but ALGO; TRACE adds each operation; an unknown
#     level is warned about and the run goes on;
#  3. a rank that hangs in an allreduce (test hook): `meshtrain trace-dump
#     --all` makes both ranks print their flight records (the allreduce
#     running, where every rank is) while the job hangs; then the timeout
#     names the late rank and its last operation;
#  4. trace-dump refuses a process that is not meshtrain (SIGUSR1 would end it).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

"$BIN" data synth --out "$TMP/data" --tokens 20000 >/dev/null
ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set train.steps=2 --set train.eval_every=0 --set train.threads=1 --set checkpoint.every=2 --nproc 2)

# 1. INFO, two parts, a file per rank.
MESHTRAIN_DEBUG=INFO MESHTRAIN_DEBUG_SUBSYS=INIT,ALGO MESHTRAIN_DEBUG_FILE="$TMP/log.%r" \
  "$BIN" train "${ARGS[@]}" --set telemetry.dir="$TMP/r1" >"$TMP/out1" 2>&1 || { cat "$TMP/out1"; fail "run 1 failed"; }
for r in 0 1; do
  test -s "$TMP/log.$r" || fail "no log file for rank $r"
  grep -E -q "^[^ ]+:[0-9]+ \[rank $r\] meshtrain INFO INIT communicator 'w0': rank $r of 2 over shm" "$TMP/log.$r" ||
    { cat "$TMP/log.$r"; fail "no INIT line for rank $r"; }
  grep -E -q "\[rank $r\] meshtrain INFO ALGO allreduce [0-9]+ B on 2 ranks over shm: [a-z_]+ \(alpha-beta model: .*direct [0-9.]+ us" "$TMP/log.$r" ||
    { cat "$TMP/log.$r"; fail "no ALGO line for rank $r"; }
  grep -q " CKPT \| DATA \| COMM " "$TMP/log.$r" && fail "rank $r logged a part left out"
done
grep -q "meshtrain INFO" "$TMP/out1" && fail "logs went to stdout/stderr despite MESHTRAIN_DEBUG_FILE"
grep -q "^done: 2 steps" "$TMP/out1" || { cat "$TMP/out1"; fail "the run's own log changed"; }

# 2. All but ALGO, to stderr; TRACE; a wrong level.
MESHTRAIN_DEBUG=INFO MESHTRAIN_DEBUG_SUBSYS=^ALGO "$BIN" train "${ARGS[@]}" --set telemetry.dir="$TMP/r2" \
  >"$TMP/out2" 2>&1 || { cat "$TMP/out2"; fail "run 2 failed"; }
grep -q "meshtrain INFO CKPT step 2: shard 1 of 2 written to" "$TMP/out2" || { cat "$TMP/out2"; fail "no CKPT line"; }
grep -q "meshtrain INFO DATA '.*train_\*.bin': 1 shard(s)" "$TMP/out2" || fail "no DATA line"
grep -q "meshtrain INFO LAUNCH job .*: rank 1 of 2 started as pid" "$TMP/out2" || fail "no LAUNCH line"
grep -q " ALGO " "$TMP/out2" && fail "ALGO was excluded"
MESHTRAIN_DEBUG=TRACE MESHTRAIN_DEBUG_SUBSYS=COMM "$BIN" train "${ARGS[@]}" --set telemetry.dir="$TMP/r3" \
  >"$TMP/out3" 2>&1 || { cat "$TMP/out3"; fail "run 3 failed"; }
grep -E -q "meshtrain TRACE COMM 'w0': allreduce #[0-9]+ \(.*\) with [a-z_]+" "$TMP/out3" || { head -50 "$TMP/out3"; fail "no TRACE line"; }
MESHTRAIN_DEBUG=LOUD "$BIN" train "${ARGS[@]}" --set telemetry.dir="$TMP/r4" >"$TMP/out4" 2>&1 ||
  { cat "$TMP/out4"; fail "a wrong level stopped the run"; }
grep -q "MESHTRAIN_DEBUG=LOUD is not a level: WARN, INFO or TRACE" "$TMP/out4" || fail "no word on the wrong level"

# 3. A hang: rank 1 sleeps 60 s in every allreduce; the timeout is 12 s.
MESHTRAIN_COMM_TEST_DELAY_US=60000000 MESHTRAIN_COMM_TEST_DELAY_RANK=1 \
  "$BIN" train "${ARGS[@]}" --set comm.timeout_s=12 --set telemetry.dir="$TMP/r5" >"$TMP/out5" 2>&1 &
job=$!
sleep 4
"$BIN" trace-dump --all >"$TMP/dump" 2>&1 || { cat "$TMP/dump"; fail "trace-dump failed"; }
grep -c "asked pid" "$TMP/dump" | grep -q "^2$" || { cat "$TMP/dump"; fail "trace-dump did not find the 2 ranks"; }
sleep 1
for r in 0 1; do
  grep -q "^\[rank $r\] flight record of communicator 'w0' (rank $r of 2), on demand:" "$TMP/out5" ||
    { cat "$TMP/out5"; fail "rank $r printed no flight record on demand"; }
done
grep -E -q "allreduce #1 \(.*\): running for [0-9.]+ (s|us)" "$TMP/out5" || fail "the hung allreduce is not shown running"
grep -q "rank 1: 0 ops done; last started: allreduce #1" "$TMP/out5" || fail "no progress of the late rank"
if wait $job; then fail "the hung job should fail at its timeout"; fi
grep -q "timed out after 12.0 s waiting for rank 1 (its last operation was allreduce #1" "$TMP/out5" ||
  { cat "$TMP/out5"; fail "the timeout does not name the late rank"; }

# 4. Not meshtrain: refused, not signalled.
sleep 30 & other=$!
if "$BIN" trace-dump $other >"$TMP/no" 2>&1; then fail "signalled a process that is not meshtrain"; fi
kill -0 $other || fail "the other process died"
kill $other
grep -q "does not run meshtrain" "$TMP/no" || { cat "$TMP/no"; fail "no reason given"; }
echo "ok"
