#!/usr/bin/env bash
# Runs the aarch64 CLI (scripts/cross-aarch64.sh's build) under QEMU's
# user-mode emulator and checks it against this machine's native build: what
# a user on an aarch64 node (e.g. NVIDIA Grace) would run first, and whether
# files move between the two architectures (a heterogeneous cluster).
#   bash scripts/aarch64-emulated.sh [AARCH64_BINARY] [NATIVE_BINARY]
# Defaults: build-aarch64/bin/meshtrain and build/bin/meshtrain. Checks:
# - `--version`: a portable aarch64 build at the scalar level, and a clear
#   refusal of an x86 level (MESHTRAIN_ISA=avx2);
# - `data synth` writes the same bytes on both architectures;
# - 2 emulated ranks (the aarch64 launcher, each rank its own QEMU, talking
#   over the shared-memory transport) train `tiny` for 4 steps in fp32 and in
#   bf16 (the scalar conversion) with the same losses as the native binary at
#   the scalar level (fp32 within 1e-5, bf16 within 1e-4 relative; the two
#   sides' OpenBLAS kernels sum in different orders);
# - a checkpoint written on either architecture resumes on the other to the
#   same losses, and both binaries sample the same text from the
#   aarch64-trained model.
# 3-11 s. Needs qemu-aarch64 (scripts/install-deps.sh --tests installs
# qemu-user) and the arm64 runtime libraries the cross-build installed.
# Without qemu-aarch64 it says so and passes, unless
# MESHTRAIN_REQUIRE_AARCH64_RUN=1 (CI sets it: .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath -m "${1:-build-aarch64/bin/meshtrain}")
N=$(realpath -m "${2:-build/bin/meshtrain}")
start=$SECONDS
fail() { echo "aarch64-emulated: FAIL: $*" >&2; exit 1; }
QEMU=$(command -v qemu-aarch64 || true)
if [ -z "$QEMU" ]; then
  why="qemu-aarch64 not installed (scripts/install-deps.sh --tests installs qemu-user)"
  [ "${MESHTRAIN_REQUIRE_AARCH64_RUN:-0}" = 1 ] && fail "$why"
  echo "aarch64-emulated: skipped: $why"
  exit 0
fi
[ -x "$A" ] || fail "no aarch64 binary at $A (run scripts/cross-aarch64.sh)"
[ -x "$N" ] || fail "no native binary at $N (run scripts/build.sh)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
emu() { "$QEMU" "$A" "$@"; }

emu --version >"$TMP/version" 2>&1 || { cat "$TMP/version"; fail "--version"; }
grep -q "build: portable aarch64" "$TMP/version" || { cat "$TMP/version"; fail "not a portable aarch64 build"; }
grep -q "dispatch level: scalar$" "$TMP/version" || { cat "$TMP/version"; fail "dispatch level is not scalar"; }
grep -q "scalar is the only dispatch level" "$TMP/version" || { cat "$TMP/version"; fail "--version offers x86 levels"; }
grep "f32 GEMM" "$TMP/version" || { cat "$TMP/version"; fail "--version names no GEMM library"; }
if MESHTRAIN_ISA=avx2 emu --version >"$TMP/bad" 2>&1; then fail "MESHTRAIN_ISA=avx2 accepted on aarch64"; fi
grep -q "asks for more than this CPU" "$TMP/bad" || { cat "$TMP/bad"; fail "unclear error for MESHTRAIN_ISA=avx2"; }

emu data synth --out "$TMP/data" --tokens 40000 >/dev/null || fail "data synth"
"$N" data synth --out "$TMP/data_native" --tokens 40000 >/dev/null || fail "native data synth"
for f in train_000000.bin val_000000.bin; do
  cmp -s "$TMP/data/$f" "$TMP/data_native/$f" || fail "data synth wrote another $f on aarch64"
done
echo "  data synth: the same shards on both architectures"

ARGS=(--set model.preset=tiny --set model.vocab_size=256 --set model.seq_len=64
      --set data.train="$TMP/data/train_*.bin" --set data.val="$TMP/data/val_*.bin"
      --set train.micro_batch=2 --set train.warmup=1 --set train.lr=1e-3
      --set train.eval_every=0 --set train.threads=1 --set telemetry.peak_gflops=1)
# check_losses A B TOL [N]: the two runs' metrics give the same N losses within TOL.
check_losses() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" "${4:-4}" <<'PY'
import json, sys
a, b, tol, n = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
la = [json.loads(x)["loss"] for x in open(a)]
lb = [json.loads(x)["loss"] for x in open(b)]
assert len(la) == len(lb) == n, (la, lb)
worst = max(abs(x - y) / abs(y) for x, y in zip(la, lb))
assert worst <= tol, f"aarch64 {la} vs native {lb}"
print(f"  losses {['%.6f' % x for x in la]}: largest relative difference {worst:.1e} (tolerance {tol})")
PY
}
for p in fp32 bf16; do
  run=(train "${ARGS[@]}" --set precision=$p --set train.steps=4 --set checkpoint.every=2
       --set checkpoint.dir="$TMP/ckpt_$p" --set telemetry.dir="$TMP/emu_$p")
  emu launch -n 2 -- "$QEMU" "$A" "${run[@]}" >"$TMP/emu.log" 2>&1 ||
    { cat "$TMP/emu.log"; fail "2-rank training on aarch64 ($p)"; }
  grep -q "data parallel: 2 ranks over shm" "$TMP/emu.log" ||
    { grep "data parallel" "$TMP/emu.log"; fail "the aarch64 ranks did not use the shared-memory transport"; }
  MESHTRAIN_ISA=scalar "$N" train "${ARGS[@]}" --set precision=$p --set train.steps=4 --nproc 2 \
    --set checkpoint.every=2 --set checkpoint.dir="$TMP/nat_ckpt_$p" --set telemetry.dir="$TMP/nat_$p" \
    >"$TMP/nat.log" 2>&1 || { cat "$TMP/nat.log"; fail "native training ($p)"; }
  tol=1e-5
  [ $p = bf16 ] && tol=1e-4
  echo "$p, 2 ranks:"
  check_losses "$TMP/emu_$p" "$TMP/nat_$p" $tol || fail "aarch64 and native losses differ ($p)"
done

# Each side's checkpoint of step 2 resumes on the other: steps 3-4 as before.
# check_resumed FULL RESUMED WHAT
check_resumed() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY'
import json, sys
a = {json.loads(x)["step"]: json.loads(x)["loss"] for x in open(sys.argv[1])}
b = {json.loads(x)["step"]: json.loads(x)["loss"] for x in open(sys.argv[2])}
assert sorted(b) == [3, 4], b
for s in b:
    assert abs(a[s] - b[s]) <= 1e-5 * abs(a[s]), (s, a[s], b[s])
print(f"  {sys.argv[3]}: steps 3-4 {[b[s] for s in (3, 4)]}")
PY
}
RESUME=(train "${ARGS[@]}" --set train.steps=4 --set checkpoint.every=0)
MESHTRAIN_ISA=scalar "$N" "${RESUME[@]}" --nproc 2 --set checkpoint.dir="$TMP/ckpt_fp32" \
  --set checkpoint.resume="$TMP/ckpt_fp32/step_00000002" --set telemetry.dir="$TMP/resumed_nat" \
  >"$TMP/resume.log" 2>&1 || { cat "$TMP/resume.log"; fail "native resume of the aarch64 checkpoint"; }
check_resumed "$TMP/emu_fp32" "$TMP/resumed_nat" "aarch64 checkpoint resumed on x86" ||
  fail "resumed losses differ (aarch64 -> x86)"
emu launch -n 2 -- "$QEMU" "$A" "${RESUME[@]}" --set checkpoint.dir="$TMP/nat_ckpt_fp32" \
  --set checkpoint.resume="$TMP/nat_ckpt_fp32/step_00000002" --set telemetry.dir="$TMP/resumed_emu" \
  >"$TMP/resume.log" 2>&1 || { cat "$TMP/resume.log"; fail "aarch64 resume of the x86 checkpoint"; }
check_resumed "$TMP/nat_fp32" "$TMP/resumed_emu" "x86 checkpoint resumed on aarch64" ||
  fail "resumed losses differ (x86 -> aarch64)"

SAMPLE=(sample --model "$TMP/emu_fp32/model.safetensors" --prompt "ab" --tokens 40 --seed 3)
emu "${SAMPLE[@]}" >"$TMP/s_emu" 2>/dev/null || fail "sample on aarch64"
MESHTRAIN_ISA=scalar "$N" "${SAMPLE[@]}" >"$TMP/s_nat" 2>/dev/null || fail "native sample"
cmp -s "$TMP/s_emu" "$TMP/s_nat" || { diff "$TMP/s_emu" "$TMP/s_nat"; fail "aarch64 samples other text"; }
echo "  sample from the aarch64 model: the same $(wc -c <"$TMP/s_emu") bytes on both architectures"
echo "aarch64-emulated: PASS in $((SECONDS - start)) s"
