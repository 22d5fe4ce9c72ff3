#!/usr/bin/env python3
"""PyTorch peer for `meshtrain bench train --preset llama-*`: the same
Llama-style shapes, trained on CPU with AdamW, timed per step.

Run with the thread count pinned everywhere, e.g.
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python3 tools/peers/bench_llama_torch.py \
      --preset llama-100m --batch 4 --seq 128 --threads 1 --steps 6 --warmup 2

The model matches meshtrain's (src/meshtrain/nn/llama.cpp): token embedding,
pre-RMSNorm blocks (eps 1e-5), q|k|v projections without biases, rotary
embeddings (rotate_half form, theta from the preset), causal attention through
F.scaled_dot_product_attention(is_causal=True, enable_gqa=True) (PyTorch's
fastest CPU attention, grouped-query heads without repeating k/v), o_proj,
SwiGLU MLP (gate, up, down), final RMSNorm and an untied head over the padded
vocabulary, cross-entropy over the real V columns. Init N(0, 0.02), norms 1.
Optimizer: torch.optim.AdamW(lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight
decay 0.1 on 2-D tensors), fused by default. --precision bf16 runs the
forward and backward under torch.autocast(cpu, bfloat16) with f32 master
weights (PyTorch's mixed precision on CPU). Data: random tokens. A step =
zero_grad + forward + backward + optimizer step; the median is reported.

--lora-rank R: PEFT-style LoRA on every linear layer of the blocks (q, k, v,
o, gate, up, down: each its own A and B, alpha 16, B zero), written in plain
PyTorch as PEFT computes it (base(x) + scale * B(A(x))) but with the fused
q|k|v and gate|up GEMMs kept fused and one stacked A per fused GEMM: the base
is frozen (requires_grad False everywhere), AdamW holds the adapters only.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# name: (n_layer, n_head, n_kv_head, n_embd, ffn_hidden, seq_len, vocab, rope_theta)
# as in src/meshtrain/nn/llama_config.cpp
PRESETS = {
    "llama-tiny": (2, 4, 2, 16, 40, 16, 61, 1e4),
    "llama-char": (6, 6, 2, 384, 1024, 256, 256, 1e4),
    "llama-100m": (12, 12, 4, 768, 2048, 1024, 50257, 1e4),
}


def pad_vocab(v):
    m = 128 if v > 1024 else 64
    return (v + m - 1) // m * m


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rotate(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self, H, KV, C, F_):
        super().__init__()
        self.H, self.KV, self.hd = H, KV, C // H
        self.ln1 = RMSNorm(C)
        self.qkv = nn.Linear(C, C + 2 * KV * self.hd, bias=False)
        self.o = nn.Linear(C, C, bias=False)
        self.ln2 = RMSNorm(C)
        self.gate_up = nn.Linear(C, 2 * F_, bias=False)
        self.down = nn.Linear(F_, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split([C, self.KV * self.hd, self.KV * self.hd], dim=2)
        q = rotate(q.view(B, T, self.H, self.hd).transpose(1, 2), cos, sin)
        k = rotate(k.view(B, T, self.KV, self.hd).transpose(1, 2), cos, sin)
        v = v.view(B, T, self.KV, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.KV != self.H)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, C))
        g, u = self.gate_up(self.ln2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class LoraLinear(nn.Module):
    """A frozen nn.Linear whose output parts (q|k|v, gate|up) each get an
    adapter: y = x W^T + (alpha / r) [B_i (A_i x)]_i."""

    def __init__(self, base, parts, r, alpha):
        super().__init__()
        self.base, self.parts, self.r, self.scale = base, parts, r, alpha / r
        fan_in = base.in_features
        self.A = nn.Parameter(torch.empty(len(parts) * r, fan_in).uniform_(-fan_in ** -0.5, fan_in ** -0.5))
        self.B = nn.ParameterList(nn.Parameter(torch.zeros(p, r)) for p in parts)

    def forward(self, x):
        u = F.linear(x, self.A)
        r = self.r
        delta = torch.cat([F.linear(u[..., i * r:(i + 1) * r], b) for i, b in enumerate(self.B)], dim=-1)
        return self.base(x) + self.scale * delta


def add_lora(model, r, alpha=16.0):
    for p in model.parameters():
        p.requires_grad_(False)
    for blk in model.layers:
        C, kv = blk.o.in_features, blk.KV * blk.hd
        blk.qkv = LoraLinear(blk.qkv, [C, kv, kv], r, alpha)
        blk.o = LoraLinear(blk.o, [blk.o.out_features], r, alpha)
        half = blk.gate_up.out_features // 2
        blk.gate_up = LoraLinear(blk.gate_up, [half, half], r, alpha)
        blk.down = LoraLinear(blk.down, [blk.down.out_features], r, alpha)


class Llama(nn.Module):
    def __init__(self, L, H, KV, C, F_, T, V, theta, block=None):
        super().__init__()
        self.V, self.Vp = V, pad_vocab(V)
        self.embed = nn.Embedding(self.Vp, C)
        self.layers = nn.ModuleList((block or Block)(H, KV, C, F_) for _ in range(L))
        self.norm = RMSNorm(C)
        self.head = nn.Linear(C, self.Vp, bias=False)
        hd = C // H
        inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)

    def logits(self, idx):
        T = idx.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.head(self.norm(x))

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits[..., : self.V].float().reshape(-1, self.V), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description="PyTorch CPU Llama training-step benchmark (meshtrain peer)")
    ap.add_argument("--preset", default="llama-char", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--optim-impl", default="fused", choices=["foreach", "fused"])
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the GPU peer: bench/cuda/train_vs_torch_gpu.py)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dev = torch.device(args.device)
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(1)
    L, H, KV, C, F_, T, V, theta = PRESETS[args.preset]
    seq = args.seq or T
    model = Llama(L, H, KV, C, F_, T, V, theta)
    if args.lora_rank > 0:
        add_lora(model, args.lora_rank)
    model.to(dev)
    trained = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trained if p.dim() >= 2]
    rest = [p for p in trained if p.dim() < 2]
    groups = [g for g in ({"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0})
              if g["params"]]
    opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if args.optim_impl == "fused" else {"foreach": True}))
    n_params = sum(p.numel() for p in model.parameters())
    flops_per_token = 6 * (n_params - model.Vp * C) + 6 * L * C * seq  # meshtrain's convention
    step_model = torch.compile(model) if args.compile else model
    gen = torch.Generator().manual_seed(1)

    def step():
        data = torch.randint(0, V, (args.batch, seq + 1), generator=gen).to(dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = step_model(data[:, :-1], data[:, 1:])
        loss.backward()
        opt.step()
        return loss.item()

    times, cpu_times = [], []
    for i in range(args.warmup + args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
    med = statistics.median(times)
    tok_s = args.batch * seq / med
    print(f"torch {torch.__version__} {args.preset} {args.precision}: median {med * 1e3:.1f} ms/step, "
          f"{tok_s:.0f} tokens/s, loss {loss:.3f}")
    if args.json:
        print(json.dumps({"peer": "pytorch", "torch_version": torch.__version__, "preset": args.preset,
                          "precision": args.precision, "batch": args.batch, "seq": seq,
                          "device": args.device, "n_params": n_params,
                          "threads": torch.get_num_threads(), "compiled": args.compile,
                          "lora_rank": args.lora_rank,
                          "trained_params": sum(p.numel() for p in trained),
                          "tokens_per_s": tok_s, "tokens_per_cpu_s": args.batch * seq / statistics.median(cpu_times),
                          "ms_per_step_median": med * 1e3, "flops_per_token": flops_per_token}))


if __name__ == "__main__":
    sys.exit(main())
