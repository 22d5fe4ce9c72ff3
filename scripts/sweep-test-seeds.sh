#!/usr/bin/env bash
# Reruns the equivalence tests over several seeds and ISA levels and prints,
# per comparison, the largest difference each run measured next to its
# tolerance: how much margin a tolerance has before it is changed (or
# after a change of reduction order). Needs a built tree (build/).
#   scripts/sweep-test-seeds.sh [seeds] [levels] [test binaries...]
#   scripts/sweep-test-seeds.sh "1 2 3" "avx2 scalar" gpt_tp_mp_test
# Defaults: seeds 1-6, every level this CPU runs, the equivalence suites.
# MESHTRAIN_TEST_SEED reaches train.seed (dp_harness.h) or the tests' own
# seeds (test_seed.h); MESHTRAIN_ISA caps the kernels' level.
set -euo pipefail
cd "$(dirname "$0")/../build"
seeds=${1:-"1 2 3 4 5 6"}
top=$(./bin/meshtrain --version | sed -n 's/^ *dispatch level: *//p')
all_levels="scalar avx2 avx512 avx512bf16"
levels=${2:-"${all_levels%%"$top"*}$top"}
shift $(( $# > 2 ? 2 : $# ))
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
  bins=(dp_equivalence_mp_test dp_mpi_test dp_overlap_mp_test instruct_train_mp_test
        llama_equivalence_mp_test llama_tp_mpi_test precision_training_mp_test tp_train_mp_test
        zero_bf16_grads_mp_test zero_checkpoint_mp_test zero_equivalence_mp_test
        zero_mixed_precision_mp_test gpt_tp_mp_test llama_tp_mp_test lora_mp_test)
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for seed in $seeds; do for level in $levels; do for b in "${bins[@]}"; do
  echo "$seed $level $b"
done; done; done | xargs -P "${JOBS:-2}" -L 1 bash -c \
  'MESHTRAIN_TEST_SEED=$0 MESHTRAIN_ISA=$1 OMP_NUM_THREADS=1 timeout 1200 ./tests/$2 \
     > '"$out"'/$0_$1_$2.log 2>&1; echo "seed $0 $1 $2: exit $?"'
python3 - "$out" <<'PY'
import collections, glob, os, re, sys
# Lines the harnesses print: "<what>: largest relative ... difference <x> ..., tolerance <t>".
pat = re.compile(r'(.*?):? largest relative (?:parameter |loss or gradient )?difference '
                 r'([0-9.e+-]+)(?: \([^)]*\))?, tolerance ([0-9.e+-]+)')
rows = collections.defaultdict(list)
for f in glob.glob(os.path.join(sys.argv[1], '*.log')):
    seed, level, binary = re.match(r'(\d+)_(\w+?)_(\w+_test)\.log', os.path.basename(f)).groups()
    test = binary
    for line in open(f, errors='replace'):
        m = re.match(r'\[ RUN +\] (\S+)', line)
        if m: test = m.group(1)
        m = pat.search(line)
        if m: rows[(test, m.group(1).strip())].append((float(m.group(2)), float(m.group(3)), seed, level))
print(f'{"largest":>9} {"tolerance":>9}  margin  comparison (worst seed/level); none: equal')
for key, vals in sorted(rows.items()):
    worst = max(vals)
    margin = f'{worst[1] / worst[0]:6.0f}x' if worst[0] > 0 else '  none'
    print(f'{worst[0]:9.2g} {worst[1]:9.2g} {margin}  {key[0]} {key[1]} ({worst[2]}/{worst[3]})')
PY
