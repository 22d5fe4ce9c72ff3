#!/usr/bin/env bash
# meshtrain doctor (doctor/doctor.h) on real local ranks over shared memory:
#  1. 4 ranks: the JSON report has every rank's facts, all 6 links measured
#     and the two allreduces next to the cost model; healthy at a lax
#     --threshold 0.05 and --slack 100 (the spread a loaded 2-vCPU machine
#     measures is not the subject here; the verdicts are unit-tested in
#     doctor_test), exit status 0;
#  2. a rank slowed 8x on purpose (MESHTRAIN_TEST_SLOW_RANK) is named with
#     its GEMM rate, exit status 3;
#  3. a cut link (MESHTRAIN_TEST_BROKEN_LINK) is named broken after the
#     timeout, the other links still measured, exit status 3 (with the lax
#     settings of 1, so only the cut link is named);
#  4. a bad flag is a usage error;
#  5. --clean (and every launch) removes /dev/shm segments of dead jobs,
#     never a live job's or one just created.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"  # BIN, SRC, TMP (removed at exit), fail

# 1. Healthy.
"$BIN" doctor -n 4 --json --threshold 0.05 --slack 100 --link-mb 1 >"$TMP/ok.json" 2>"$TMP/ok.err" ||
  { cat "$TMP/ok.json" "$TMP/ok.err"; fail "doctor on 4 healthy ranks failed"; }
python3 - "$TMP/ok.json" <<'PY' || fail "the JSON report is not what it should be"
import json, sys
r = json.load(open(sys.argv[1]))
assert set(r) >= {"transport", "world", "seconds", "healthy", "problems", "notes", "ranks", "links", "collectives"}, r.keys()
assert r["world"] == 4 and r["healthy"] is True and r["problems"] == [], r["problems"]
assert [x["rank"] for x in r["ranks"]] == [0, 1, 2, 3]
for x in r["ranks"]:
    for k, t in {"pid": int, "cores": int, "host": str, "cpu": str, "isa": str, "threads": int, "gemm_gflops": float,
                 "mem_available_gb": float, "disk_free_gb": float, "clock_offset_ms": float}.items():
        assert isinstance(x[k], t), (k, x)
    assert x["gemm_gflops"] > 0 and x["mem_available_gb"] > 0 and x["disk_free_gb"] > 0, x
    assert abs(x["clock_offset_ms"]) < 50, x  # one host, one clock
assert len({x["pid"] for x in r["ranks"]}) == 4
pairs = [(l["a"], l["b"]) for l in r["links"]]
assert pairs == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)], pairs
for l in r["links"]:
    assert l["ok"] and l["gbps"] > 0 and l["latency_us"] > 0 and l["error"] == "", l
assert [c["bytes"] for c in r["collectives"]] == [8, 16 << 20], r["collectives"]
for c in r["collectives"]:
    assert c["op"] == "allreduce" and c["algorithm"] and c["measured_us"] > 0 and c["expected_us"] > 0 and c["model_us"] > 0, c
print(f"4 ranks: {r['seconds']:.2f} s, links {min(l['gbps'] for l in r['links']):.2f}-"
      f"{max(l['gbps'] for l in r['links']):.2f} GB/s")
PY

# 2. A slow rank.
rc=0
MESHTRAIN_TEST_SLOW_RANK=2:8 "$BIN" doctor -n 4 --link-mb 1 >"$TMP/slow.txt" 2>&1 || rc=$?
cat "$TMP/slow.txt"
[ "$rc" -eq 3 ] || fail "a slowed rank should give exit status 3, got $rc"
grep -E -q "rank 2 \(.*\): GEMM [0-9.]+ GFLOP/s, below 0.5 x the ranks' median" "$TMP/slow.txt" ||
  fail "the slow rank is not named"

# 3. A cut link.
rc=0
MESHTRAIN_TEST_BROKEN_LINK=1-3 "$BIN" doctor -n 4 --link-mb 1 --timeout-s 1 --threshold 0.05 --slack 100 --json \
  >"$TMP/cut.json" 2>"$TMP/cut.err" || rc=$?
[ "$rc" -eq 3 ] || { cat "$TMP/cut.json" "$TMP/cut.err"; fail "a cut link should give exit status 3, got $rc"; }
python3 - "$TMP/cut.json" <<'PY' || fail "the cut link is not reported right"
import json, sys
r = json.load(open(sys.argv[1]))
broken = [(l["a"], l["b"]) for l in r["links"] if not l["ok"]]
assert broken == [(1, 3)], broken
assert all(l["gbps"] > 0 for l in r["links"] if l["ok"]) and len(r["links"]) == 6
assert any(p.startswith("link 1-3: broken") for p in r["problems"]), r["problems"]
print("problems:", r["problems"])
PY

# 5. --clean: a segment of a dead job (no process maps it, older than the grace
# period) goes; a live job's (mapped by a running process) and a fresh one stay.
dead=mt-doctortest$$-hb; live=mt-doctortest$$-live; fresh=mt-doctortest$$-fresh
head -c 4096 /dev/zero >/dev/shm/$dead && touch -d '2 minutes ago' /dev/shm/$dead
head -c 4096 /dev/zero >/dev/shm/$live && touch -d '2 minutes ago' /dev/shm/$live
head -c 4096 /dev/zero >/dev/shm/$fresh
cleanup_shm() { rm -f /dev/shm/$dead /dev/shm/$live /dev/shm/$fresh; rm -rf "$TMP"; }
trap cleanup_shm EXIT
python3 -c "
import mmap, os, sys, time
f = open('/dev/shm/$live', 'r+b'); m = mmap.mmap(f.fileno(), 4096)
open('$TMP/mapped', 'w').close(); time.sleep(60)" &
holder=$!
for _ in $(seq 100); do [ -e "$TMP/mapped" ] && break; sleep 0.1; done
"$BIN" doctor --clean -n 2 --threshold 0.05 --slack 100 --link-mb 1 >"$TMP/clean.txt" 2>&1 ||
  { kill $holder; cat "$TMP/clean.txt"; fail "doctor --clean failed"; }
kill $holder; wait $holder 2>/dev/null || true
cat "$TMP/clean.txt"
[ ! -e /dev/shm/$dead ] || fail "the dead job's segment was not removed"
[ -e /dev/shm/$live ] || fail "a live job's segment was removed"
[ -e /dev/shm/$fresh ] || fail "a segment inside the grace period was removed"
grep -q "/dev/shm/$dead" "$TMP/clean.txt" || fail "the removal is not reported"
# The launcher does the same at start.
head -c 4096 /dev/zero >/dev/shm/$dead && touch -d '2 minutes ago' /dev/shm/$dead
"$BIN" launch -n 1 -- true >"$TMP/launch.txt" 2>&1 || { cat "$TMP/launch.txt"; fail "launch failed"; }
[ ! -e /dev/shm/$dead ] || fail "the launcher left the dead job's segment"
grep -q "removed .* shared-memory segment" "$TMP/launch.txt" || { cat "$TMP/launch.txt"; fail "the launcher did not say"; }

# 4. A bad flag.
if "$BIN" doctor -n 2 --threshold 2 >"$TMP/bad.txt" 2>&1; then fail "--threshold 2 accepted"; fi
grep -q "threshold" "$TMP/bad.txt" || { cat "$TMP/bad.txt"; fail "no word on the bad flag"; }
echo "ok"
