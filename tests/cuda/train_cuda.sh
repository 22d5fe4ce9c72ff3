#!/usr/bin/env bash
# Whole training runs on the GPU (`train --set device=cuda`) against the CPU:
#   - GPT and Llama, fp32 and bf16, 20 steps: the losses agree within the
#     precision's tolerance at every step (fp32 2e-3, bf16 3e-2 relative: the
#     two backends sum in different orders, and 20 updates compound that);
#   - recompute = full on the GPU gives bitwise the losses and model of none;
#   - deterministic: two GPU runs give bitwise-identical losses and models;
#   - a checkpoint written on the GPU resumes on the CPU and one written on
#     the CPU resumes on the GPU, each continuing within the tolerance;
#   - the GPU allocator's per-category peaks equal the memory formulas.
# Usage: bash tests/cuda/train_cuda.sh BINARY (exit 77, with the reason, without a GPU).
set -euo pipefail
BIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no GPU visible (nvidia-smi -L fails)"
  exit 77
fi
"$BIN" --version | grep -E "^ *cuda: .* [1-9][0-9]* GPU" >/dev/null || fail "this meshtrain has no CUDA backend that sees a GPU: $("$BIN" --version | grep cuda)"

"$BIN" data synth --out "$TMP/data" --tokens 60000 >/dev/null
# train NAME DEVICE [--set ...]: 20 steps of char-2L (vocabulary 256).
train() {
  local name=$1 dev=$2
  shift 2
  "$BIN" train --set model.preset=char-2L --set data.train="$TMP/data/train_*.bin" \
    --set train.steps=20 --set train.micro_batch=4 --set train.warmup=4 --set train.lr=3e-3 \
    --set train.eval_every=0 --set device="$dev" --set telemetry.dir="$TMP/$name" "$@" \
    >"$TMP/$name.log" 2>&1 || { grep -av '^[ {}]' "$TMP/$name.log" | tail -20; fail "train $name on $dev failed"; }
}
# close A B TOL [FIRST]: the losses of steps FIRST..20 agree within relative TOL (0: bitwise).
close() {
  python3 - "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "$3" "${4:-1}" <<'PY' || fail "$1 vs $2"
import json, sys
def losses(p):
    out = {}
    for l in open(p):
        if l.strip():
            r = json.loads(l)
            out[r["step"]] = r["loss"]
    return out
a, b, tol, first = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
steps = range(first, 21)
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in steps)
print(f"{sys.argv[1].split('/')[-2]} vs {sys.argv[2].split('/')[-2]}: steps {first}-20, "
      f"largest relative loss difference {worst:.2e} (tolerance {tol:g})")
assert worst <= tol, (worst, tol)
PY
}
for precision in fp32 bf16; do
  tol=$([ $precision = fp32 ] && echo 2e-3 || echo 3e-2)
  for preset in char-2L llama-char; do
    name=${preset}_${precision}
    train "cpu_$name" cpu --set model.preset=$preset --set precision=$precision
    train "gpu_$name" cuda --set model.preset=$preset --set precision=$precision
    close "cpu_$name" "gpu_$name" "$tol"
  done
done
grep -q "^device: cuda:0 | " "$TMP/gpu_char-2L_fp32.log" || fail "the GPU run does not say where it trains"

# Recompute and determinism on the GPU: bitwise.
train gpu_full cuda --set recompute=full --set precision=bf16
close gpu_char-2L_bf16 gpu_full 0
cmp -s "$TMP/gpu_char-2L_bf16/model.safetensors" "$TMP/gpu_full/model.safetensors" || fail "recompute changed the model"
train gpu_det1 cuda --set deterministic=true --set precision=bf16
train gpu_det2 cuda --set deterministic=true --set precision=bf16
close gpu_det1 gpu_det2 0
cmp -s "$TMP/gpu_det1/model.safetensors" "$TMP/gpu_det2/model.safetensors" || fail "deterministic GPU runs differ"

# Checkpoints across devices: saved at step 10, continued on the other.
train ck_gpu cuda --set checkpoint.dir="$TMP/ck_gpu/ckpt" --set checkpoint.every=10
train ck_cpu cpu --set checkpoint.dir="$TMP/ck_cpu/ckpt" --set checkpoint.every=10
train gpu_to_cpu cpu --set checkpoint.resume="$TMP/ck_gpu/ckpt/step_00000010"
train cpu_to_gpu cuda --set checkpoint.resume="$TMP/ck_cpu/ckpt/step_00000010"
close ck_gpu gpu_to_cpu 2e-3 11
close ck_cpu cpu_to_gpu 2e-3 11

# The GPU allocator's peaks against the formulas.
python3 - "$TMP/gpu_llama-char_bf16/memory.json" <<'PY' || fail "GPU memory differs from the prediction"
import json, sys
m = json.load(open(sys.argv[1]))[0]
for c in ("parameters", "gradients", "optimizer", "activations", "workspace"):
    print(f"{c}: measured {m['peak'][c]:.0f} B, predicted {m['predicted'][c]} B")
    assert m["peak"][c] == m["predicted"][c], c
PY
echo "ok"
