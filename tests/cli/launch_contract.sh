#!/usr/bin/env bash
# meshtrain launch: environment contract, rank-prefixed output, failure
# reporting (exit status and signal), usage errors, and a real collective job.
set -u
bin="$1"
dir="$(dirname "$bin")"
fail() { echo "FAIL: $*"; exit 1; }

out=$("$bin" launch -n 3 -- sh -c 'echo "r=$MESHTRAIN_RANK w=$MESHTRAIN_WORLD_SIZE lr=$MESHTRAIN_LOCAL_RANK lw=$MESHTRAIN_LOCAL_WORLD_SIZE job=${MESHTRAIN_JOB_ID:+set}"') \
  || fail "3 healthy ranks should exit 0"
for r in 0 1 2; do
  grep -qx "\[rank $r\] r=$r w=3 lr=$r lw=3 job=set" <<<"$out" || fail "missing line for rank $r in: $out"
done

err=$("$bin" launch -n 3 -- sh -c '[ "$MESHTRAIN_RANK" = 1 ] && exit 7; sleep 30' 2>&1)
rc=$?
[ $rc -ne 0 ] || fail "a failing rank must make launch fail"
grep -q "rank 1 exited with status 7" <<<"$err" || fail "message should name rank 1 and status 7: $err"

start=$(date +%s)
err=$("$bin" launch -n 2 --grace 1 -- sh -c '[ "$MESHTRAIN_RANK" = 0 ] && kill -9 $$; trap "" TERM; sleep 30' 2>&1)
rc=$?
[ $rc -ne 0 ] || fail "a killed rank must make launch fail"
grep -q "rank 0 was killed by signal 9" <<<"$err" || fail "message should name the signal: $err"
[ $(( $(date +%s) - start )) -lt 15 ] || fail "the other rank should be stopped (SIGKILL after grace)"

"$bin" launch -n 2 >/dev/null 2>&1; [ $? -eq 2 ] || fail "launch without a command is a usage error (2)"
"$bin" launch --bogus -n 2 -- true >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown flag is a usage error (2)"

# A real job: the collective check matrix over 3 launched ranks.
if [ -x "$dir/comm_check" ]; then
  "$bin" launch -n 3 -- "$dir/comm_check" >/dev/null || fail "comm_check under launch failed"
fi
echo "launch_contract: ok"
