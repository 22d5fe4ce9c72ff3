#!/usr/bin/env bash
# Wrong flags and values for `meshtrain data` exit 2 and print the usage hint.
set -uo pipefail
BIN=$1
fail=0
expect() {  # expect STATUS ARGS...
  local want=$1; shift
  "$BIN" "$@" >/dev/null 2>&1
  local rc=$?
  if [ "$rc" -ne "$want" ]; then echo "FAIL: meshtrain $* exited $rc, expected $want"; fail=1; fi
}
expect 2 data prepare --input x --out y --no-such-flag
expect 2 data prepare --out y                      # --input missing
expect 2 data synth --out y                        # --tokens missing
expect 2 data synth --out y --tokens abc
expect 2 data prepare --input x --out y --val-fraction 1.5
expect 2 data frobnicate
expect 2 data
expect 0 data --help
expect 0 data prepare --help
out=$("$BIN" data prepare --bogus 2>&1)
echo "$out" | grep "usage" >/dev/null || { echo "FAIL: no usage hint in: $out"; fail=1; }
[ $fail -eq 0 ] && echo PASS
exit $fail
