#!/usr/bin/env python3
"""PyTorch peer for `meshtrain bench attention`: one layer's causal attention
at a preset's shapes, forward and backward, f32 on CPU.

  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python3 tools/peers/bench_attention_torch.py \
      --preset char-6L --batch 8 --threads 1 --reps 11

Input is one (B, T, 3C) qkv tensor split into heads like the model's (the
views and transposes are part of what PyTorch's attention layer does per
step); attention is F.scaled_dot_product_attention(is_causal=True), PyTorch's
fastest CPU path (flash attention for f32 on CPU). The timing covers the
layer's attention core as the model runs it: the head split and merge
(transpose + contiguous) and the gradient of the split, not SDPA alone.
Backward takes a random output gradient. Medians of --reps timed repetitions after two warm-ups;
GFLOP/s counts the causal products like meshtrain's benchmark (2 forward, 5
backward, each 2*B*NH*hd*T(T+1)/2).
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from peer_util import add_shape_options

# name: (n_layer, n_head, n_embd, seq_len) as in src/meshtrain/nn/gpt_config.cpp
PRESETS = {
    "gpt2": (12, 12, 768, 1024),
    "gpt2-medium": (24, 16, 1024, 1024),
    "gpt2-large": (36, 20, 1280, 1024),
    "gpt2-xl": (48, 25, 1600, 1024),
    "char-6L": (6, 6, 384, 256),
    "char-2L": (2, 4, 128, 128),
    "tiny": (2, 2, 16, 16),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_shape_options(ap, sorted(PRESETS), preset="char-6L", batch=8)
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    L, NH, C, ctx = PRESETS[a.preset]
    if not 0 <= a.seq <= ctx or a.batch < 1 or a.reps < 1 or a.threads < 1:
        ap.error(f"--seq must be in 1..{ctx}, --batch, --reps and --threads >= 1")
    B, T, hd = a.batch, a.seq or ctx, C // NH
    g = torch.Generator().manual_seed(1)
    qkv = torch.randn(B, T, 3 * C, generator=g).requires_grad_(True)
    dout = torch.randn(B, T, C, generator=g)

    def forward():
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (x.view(B, T, NH, hd).transpose(1, 2) for x in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).contiguous().view(B, T, C)

    f_ms, b_ms = [], []
    for rep in range(-2, a.reps):
        t0 = time.perf_counter()
        y = forward()
        t1 = time.perf_counter()
        qkv.grad = None
        y.backward(dout)
        t2 = time.perf_counter()
        if rep >= 0:
            f_ms.append((t1 - t0) * 1e3)
            b_ms.append((t2 - t1) * 1e3)
    f, b = statistics.median(f_ms), statistics.median(b_ms)
    product = 2.0 * B * NH * hd * (T * (T + 1) / 2.0)
    gflops = 7 * product / ((f + b) * 1e-3) * 1e-9
    if a.json:
        print(json.dumps({"path": "torch-sdpa", "fwd_ms": f, "bwd_ms": b, "gflops": gflops,
                          "per_step_ms": (f + b) * L, "threads": a.threads, "batch": B, "seq": T,
                          "preset": a.preset, "torch": torch.__version__}))
    else:
        print(f"torch {torch.__version__} sdpa: {a.preset} batch {B} x seq {T}, {a.threads} thread(s): "
              f"fwd {f:.2f} ms  bwd {b:.2f} ms  {gflops:.1f} GFLOP/s  per step {(f + b) * L:.1f} ms")


if __name__ == "__main__":
    main()
