#!/usr/bin/env bash
# Where one training step's GPU time goes, kernel by kernel: Nsight Compute
# times every kernel of a short run (one metric, gpu__time_duration, clocks
# as found) and the table sums them by kernel name, largest first.
#   bash bench/cuda/profile_step.sh BINARY [PRESET] [MICRO_BATCH]   (on the GPU machine)
set -euo pipefail
BIN=$1 PRESET=${2:-gpt2} MB=${3:-8}
out=${OUT:-gpu-results}
mkdir -p "$out"
work=$(mktemp -d)
"$BIN" data synth --out "$work/syn" --tokens 200000 >/dev/null
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || ls /usr/local/cuda/bin/ncu)
"$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$BIN" train --set model.preset="$PRESET" --set "data.train=$work/syn/train_*.bin" --set train.steps=1 \
  --set train.micro_batch="$MB" --set model.seq_len=1024 --set precision=bf16 --set device=cuda \
  --set train.eval_every=0 --set telemetry.dir="$work/tel" > "$out/ncu_$PRESET.csv" 2> "$out/ncu_$PRESET.err" || true
python3 - "$out/ncu_$PRESET.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head = rows[0]
ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
unit = rows[1][ti]
tot, cnt = collections.Counter(), collections.Counter()
for r in rows[2:]:
    name = r[ki].split("(")[0][:70]
    tot[name] += float(r[ti].replace(",", "")); cnt[name] += 1
scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}[unit]
all_ms = sum(tot.values()) * scale
print(f"{len(rows) - 2} kernels, {all_ms:.1f} ms of GPU time (one step, {unit})")
for name, t in tot.most_common(30):
    print(f"{t * scale:9.2f} ms {t * scale / all_ms * 100:5.1f}% x{cnt[name]:4d}  {name}")
PY
