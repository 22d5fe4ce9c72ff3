#!/usr/bin/env bash
# PyTorch DDP and FSDP2 train the same 10 steps on "meshtrain" as on "gloo":
# equal losses (2 ranks: every sum has two terms, so the orders agree bit for
# bit) and parameters. Usage: train_parity.sh <python> <build/python> <ddp|fsdp>
set -euo pipefail
py=$1 pkg=$2 mode=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1
for backend in meshtrain gloo; do
  "$py" -m torch.distributed.run --standalone --nproc-per-node 2 \
    "$here/train_parity.py" --backend "$backend" --mode "$mode" --out "$work/$backend.json"
done
"$py" - "$work/meshtrain.json" "$work/gloo.json" <<'PY'
import json, sys
ours, theirs = (json.load(open(p)) for p in sys.argv[1:])
print("meshtrain:", ours["losses"])
print("gloo:     ", theirs["losses"])
assert ours == theirs, f"meshtrain and gloo differ: {ours} vs {theirs}"
assert len(ours["losses"]) == 10 and ours["losses"][-1] < 0.9 * ours["losses"][0], "did not train"
print("equal losses and parameters on meshtrain and gloo")
PY
