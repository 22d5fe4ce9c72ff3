# Shared by the chaos_* tests (sourced, not run): a temp dir, the common
# deterministic 3-rank configuration, loss/restart-log/leak checks, and the
# uninterrupted reference run in $TMP/ref every chaos run is compared with.
BIN=$1
TMP=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; [ -n "${KEEP:-}" ] && echo "kept $TMP"; exit 1; }

"$BIN" data synth --out "$TMP/data" --tokens 40000 >/dev/null
NP=3
ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set data.train="$TMP/data/train_*.bin"
      --set train.steps=30 --set train.warmup=2 --set train.lr=3e-3 --set train.eval_every=0
      --set train.threads=1 --set train.micro_batch=2 --set checkpoint.every=4
      --set checkpoint.keep_last=0 --set checkpoint.resume=auto --set deterministic=true)

# same_losses A B FIRST TOL: steps FIRST..30 (lib/losses.sh).
source "$(dirname "${BASH_SOURCE[0]}")/losses.sh"
same_losses_30() { same_losses "$1" "$2" "$3" "$4" 30; }

# The restart log's events, one "event:cause:rank:new_world" per line.
events() {
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f'{r["event"]}:{r.get("cause", "")}:{r.get("rank", "")}:{r.get("new_world", r.get("world", ""))}')
PY
}

# No process and no shared memory of any job in the restart log survives.
no_leaks() {
  for job in $(python3 -c 'import json,sys; [print(json.loads(l)["job"]) for l in open(sys.argv[1])]' "$1"); do
    ls /dev/shm | grep -q "^mt-$job-" && fail "shared memory of job $job left in /dev/shm"
    for env in /proc/[0-9]*/environ; do
      grep -qz "^MESHTRAIN_JOB_ID=$job$" "$env" 2>/dev/null && fail "a process of job $job is still running ($env)"
    done
  done
  return 0
}

# 1. Reference.
"$BIN" train "${ARGS[@]}" --nproc $NP --set telemetry.dir="$TMP/ref" >"$TMP/log_ref" 2>&1 ||
  { cat "$TMP/log_ref"; fail "reference run failed"; }

