#!/usr/bin/env python3
"""Training throughput on one NVIDIA GPU: meshtrain (`train --set device=cuda`)
against PyTorch eager and torch.compile (SDPA, fused AdamW, bf16 autocast with
f32 master weights), same model, batch, context and optimizer, interleaved
(ours, eager, compiled, ours, eager, ...) so that clock and thermal drift hit
all alike. Prints per-run figures, then medians, ratios, MFU and meshtrain's
peak GPU memory against its prediction.

  python3 bench/cuda/train_vs_torch_gpu.py --binary build-cuda/bin/meshtrain
  python3 bench/cuda/train_vs_torch_gpu.py --presets gpt2 --batch 8 --rounds 3

MFU uses --peak-tflops (default 989: the dense bf16 tensor-core peak of the
H100 SXM and the H200) and the model-FLOPs convention of docs/ARCHITECTURE.md
(6N + 6LCT per token, N without the position embeddings), on both sides.
Runs on the GPU machine (scripts/gpu-check.sh run bench); its Python has a
CUDA build of PyTorch.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def peer_script(preset):
    """The PyTorch peer of a meshtrain preset's family."""
    return "bench_llama_torch.py" if preset.startswith("llama") else "bench_train_torch.py"


def run(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).splitlines()[-15:])
        raise RuntimeError(f"{what} failed (exit {p.returncode}):\n{tail}")
    return p.stdout


def ours(a, preset, data, work, i):
    """One meshtrain run; its steady-state median tokens/s and memory report."""
    d = os.path.join(work, f"ours_{preset}_{i}")
    run([a.binary, "train", "--set", f"model.preset={preset}", "--set", f"data.train={data}",
         "--set", f"train.steps={a.warmup + a.steps}", "--set", f"train.micro_batch={a.batch}",
         "--set", f"model.seq_len={a.seq}", "--set", "precision=bf16", "--set", f"device={a.device}",
         "--set", "train.eval_every=0", "--set", f"telemetry.dir={d}",
         "--set", f"telemetry.peak_gflops={a.peak_tflops * 1000}"], f"meshtrain {preset}")
    rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
    tok_s = statistics.median(r["tokens_per_s"] for r in rows[a.warmup:])
    mem = json.load(open(os.path.join(d, "memory.json")))[0]
    return tok_s, mem


def peer(a, preset, compiled):
    cmd = [a.python, os.path.join(ROOT, "tools", "peers", peer_script(preset)), "--preset", preset,
           "--device", a.device, "--precision", "bf16", "--batch", str(a.batch), "--seq", str(a.seq),
           "--steps", str(a.steps), "--warmup", str(a.warmup + (3 if compiled else 0)),
           "--optim-impl", "fused", "--json"] + (["--compile"] if compiled else [])
    j = json.loads(run(cmd, f"torch {preset}{' compiled' if compiled else ''}").splitlines()[-1])
    if compiled and not j.get("compiled"):
        raise RuntimeError("torch.compile did not compile the peer")
    return j["tokens_per_s"], j["flops_per_token"], j.get("torch_version", "")


def bench(a, preset, data, work):
    res = {"ours": [], "eager": [], "compiled": []}
    mem, fpt, version = None, 0, ""
    for r in range(a.rounds):
        t, mem = ours(a, preset, data, work, r)
        res["ours"].append(t)
        t, fpt, version = peer(a, preset, False)
        res["eager"].append(t)
        if r < a.compiled_rounds:
            res["compiled"].append(peer(a, preset, True)[0])
        print(f"round {r + 1} {preset}: meshtrain {res['ours'][-1]:.0f} tok/s, torch eager "
              f"{res['eager'][-1]:.0f}" + (f", torch.compile {res['compiled'][-1]:.0f}"
                                            if r < a.compiled_rounds else ""), flush=True)
    med = {k: statistics.median(v) for k, v in res.items() if v}
    mfu = lambda tok_s: tok_s * fpt / (a.peak_tflops * 1e12)
    print(f"\n{preset}, bf16, batch {a.batch} x {a.seq}, medians of {a.rounds} interleaved rounds "
          f"({a.steps} timed steps each; torch.compile {len(res['compiled'])} round(s)); torch {version}")
    for k in ("ours", "eager", "compiled"):
        if k in med:
            print(f"  {k:9s} {med[k]:10.0f} tokens/s   MFU {mfu(med[k]) * 100:5.1f}%")
    for k in ("eager", "compiled"):
        if k in med:
            print(f"  meshtrain / torch {k}: {med['ours'] / med[k]:.2f}x")
    total = mem["peak"]
    pred = mem["predicted"]
    print(f"  meshtrain peak {a.device} memory (training): {mem['training_peak_total'] / 1e9:.2f} GB "
          f"measured, {pred['training_total'] / 1e9:.2f} GB predicted "
          f"({(mem['training_peak_total'] / pred['training_total'] - 1) * 100:+.1f}%)")
    for c in ("parameters", "gradients", "optimizer", "activations", "workspace"):
        print(f"    {c:12s} {total[c] / 1e6:9.1f} MB measured, {pred[c] / 1e6:9.1f} MB predicted")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build-cuda", "bin", "meshtrain"))
    ap.add_argument("--python", default=sys.executable, help="the peer's interpreter (PyTorch with CUDA)")
    ap.add_argument("--presets", nargs="+", default=["gpt2", "llama-100m"])
    ap.add_argument("--device", default="cuda", help="cuda (cpu: a quick check of this script)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=15, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--compiled-rounds", type=int, default=1,
                    help="rounds that also run torch.compile (each compiles anew, about a minute)")
    ap.add_argument("--peak-tflops", type=float, default=989.0,
                    help="dense bf16 peak of the GPU (H100 SXM / H200: 989)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data")
        tokens = a.batch * (a.seq + 1) * (a.warmup + a.steps) * 2
        run([a.binary, "data", "synth", "--out", data, "--tokens", str(tokens)], "data synth")
        for preset in a.presets:
            bench(a, preset, os.path.join(data, "train_*.bin"), work)


if __name__ == "__main__":
    main()
