#!/usr/bin/env bash
# Chaos with real processes, files and signals (docs/FAULT_TOLERANCE.md):
#  1. a reference run: 3 ranks, deterministic, 30 steps, a checkpoint every 4;
#  2. three seeds: a random rank sends itself SIGKILL at a random step of a run
#     launched with --max-restarts; the job restarts, resumes and its final
#     losses and model are bitwise the reference's; every restart is in the
#     restart log, and `meshtrain report` lists and marks it (cause, rank,
#     steps run again); nothing is left in /dev/shm or in the process table.
# chaos_faults.sh covers hangs, a kill inside a save and a slot that keeps failing.
set -euo pipefail
source "$(dirname "$0")/lib/chaos_common.sh"  # BIN, TMP, ARGS, checks, reference run

# 2. SIGKILL of a random rank at a random step, three seeds.
for seed in 1 2 3; do
  RANDOM=$seed
  rank=$((RANDOM % NP))
  step=$((3 + RANDOM % 26))
  d="$TMP/kill$seed"
  MESHTRAIN_TEST_KILL_AT_STEP=$rank:$step "$BIN" train "${ARGS[@]}" --nproc $NP --max-restarts 2 \
    --set telemetry.dir="$d" >"$d.log" 2>&1 || { cat "$d.log"; fail "seed $seed: job with a killed rank failed"; }
  grep -q "rank $rank sends itself SIGKILL at step $step" "$d.log" || { cat "$d.log"; fail "seed $seed: the kill did not happen"; }
  ev=$(events "$d/restarts.jsonl")
  grep -qx "restart:signal:$rank:$NP" <<<"$ev" || fail "seed $seed: restart not logged with its cause: $ev"
  grep -q "^training_again:" <<<"$ev" || fail "seed $seed: no training_again record: $ev"
  grep -q "^finished:" <<<"$ev" || fail "seed $seed: no finished record: $ev"
  grep -q "restart 1/2: rank $rank was killed by signal 9" "$d.log" || fail "seed $seed: no restart line on stderr"
  same_losses_30 "$d/metrics.jsonl" "$TMP/ref/metrics.jsonl" 1 0 || fail "seed $seed (rank $rank, step $step): losses differ"
  cmp -s "$d/model.safetensors" "$TMP/ref/model.safetensors" || fail "seed $seed: final model differs"
  no_leaks "$d/restarts.jsonl"
  # meshtrain report names the restart, its cause and the steps run again, and marks it.
  "$BIN" report "$d" >"$d.report" 2>&1 || { cat "$d.report"; fail "seed $seed: report failed"; }
  python3 - "$d.report" "$d/metrics.jsonl" "$rank" <<'PY' || { cat "$d.report"; fail "seed $seed: the report does not show the restart"; }
import json, re, sys
text, rank = open(sys.argv[1]).read(), int(sys.argv[3])
steps = [json.loads(l)["step"] for l in open(sys.argv[2]) if l.strip()]
drops = [i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]]
m = re.search(r"1 restart\(s\): 30 steps, (\d+) of them run again", text)
assert m and int(m.group(1)) == len(steps) - 30, (m and m.group(0), len(steps))
head = f"signal, rank {rank} (rank {rank} was killed by signal 9 (Killed))"
if drops:  # the kill came after steps past a checkpoint: those ran again
    reached, resumed = steps[drops[0] - 1], steps[drops[0]] - 1
    assert resumed % 4 == 0, resumed  # a checkpoint every 4 steps
    want = f"restart 1 after step {reached}: {head}; resumed from step {resumed}, {reached - resumed} step"
else:     # right after a checkpoint: nothing ran again
    want = f"restart 1: {head}; its last heartbeat step"
assert want in text, want
PY
  grep -q 'class="restart"' "$d/report.svg" || fail "seed $seed: no restart mark in report.svg"
  echo "seed $seed: rank $rank killed at step $step; restarted, bitwise equal"
done

echo ok
