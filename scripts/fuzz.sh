#!/usr/bin/env bash
# Fuzzes the parsers of users' files (tests/fuzz/README.md) with libFuzzer
# under AddressSanitizer and UndefinedBehaviorSanitizer:
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Builds build-fuzz/ with clang, then runs each target (default: all) for
# SECONDS (default 60) on a work corpus seeded with the repository's files of
# that format. A finding is copied to tests/fuzz/corpus/<target>/, where the
# normal build's ctest (`fuzz.<target>`) replays it from then on. Exits 1 when
# a target found something.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
ALL=(safetensors gpt_model_file token_shard tokenizer_json config checkpoint_index hf_llama
     instruct_jsonl cluster)
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL[@]}")
usage() { echo "fuzz: $*"; echo "usage: bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]; targets: ${ALL[*]}"; exit 2; }
[[ "$SECONDS_PER_TARGET" =~ ^[1-9][0-9]*$ ]] || usage "SECONDS_PER_TARGET must be a positive whole number, got '$SECONDS_PER_TARGET'"
for t in "${TARGETS[@]}"; do
  [[ " ${ALL[*]} " == *" $t "* ]] || usage "unknown target '$t'"
done
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (apt-get install clang libomp-dev)"; exit 2; }

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMESHTRAIN_FUZZ=ON -DMESHTRAIN_SANITIZE=ON -DMESHTRAIN_BUILD_TESTS=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target $(printf '%s_fuzz ' "${TARGETS[@]}")

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
found=0
for t in "${TARGETS[@]}"; do
  work=build-fuzz/fuzz-work/$t
  rm -rf "$work/findings"
  mkdir -p "$work/corpus" "$work/findings"
  while read -r seed; do
    [ -n "$seed" ] && cp "$seed" "$work/corpus/seed_$(basename "$(dirname "$seed")")_$(basename "$seed")"
  done <"build-fuzz/tests/fuzz/$t.seeds"
  [ -d "tests/fuzz/corpus/$t" ] && cp tests/fuzz/corpus/$t/* "$work/corpus/" 2>/dev/null || true
  echo "== $t: ${SECONDS_PER_TARGET} s, $(ls "$work/corpus" | wc -l) inputs in the corpus"
  set +e
  "build-fuzz/tests/fuzz/${t}_fuzz" -max_total_time="$SECONDS_PER_TARGET" -timeout=20 \
    -rss_limit_mb=2048 -dict=tests/fuzz/json.dict -artifact_prefix="$work/findings/" \
    -print_final_stats=1 "$work/corpus" >"$work/log" 2>&1
  rc=$?
  set -e
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$work/log" | sed 's/^/  /'
  if [ $rc -ne 0 ] || ls "$work/findings"/* >/dev/null 2>&1; then
    found=1
    echo "  FINDING (exit $rc):"
    { grep -m3 -E "ERROR: |runtime error|terminate called|what\(\)" "$work/log" || true; } | sed 's/^/    /'
    mkdir -p "tests/fuzz/corpus/$t"
    for f in "$work/findings"/*; do
      [ -f "$f" ] || continue
      cp "$f" "tests/fuzz/corpus/$t/$(basename "$f")"
      echo "  saved tests/fuzz/corpus/$t/$(basename "$f") (log: $work/log)"
    done
  fi
done
exit $found
