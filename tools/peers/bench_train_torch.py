#!/usr/bin/env python3
"""PyTorch peer for `meshtrain bench train`: the same GPT-2 shapes, trained on
CPU in f32 with AdamW, timed per step.

Run with the thread count pinned everywhere, e.g. for 4 threads:
  OMP_NUM_THREADS=4 MKL_NUM_THREADS=4 python3 tools/peers/bench_train_torch.py \
      --preset char-6L --batch 8 --seq 256 --threads 4 --steps 20 --warmup 3

The model matches meshtrain's: learned wte/wpe, pre-LayerNorm blocks (eps 1e-5),
causal self-attention through F.scaled_dot_product_attention(is_causal=True)
(PyTorch's fastest CPU attention), tanh-approximated GELU, output head tied to
wte producing logits over the padded vocabulary, cross-entropy over the real V
columns. Init: N(0, 0.02), residual projections scaled by 1/sqrt(2L), zero
biases. Optimizer: torch.optim.AdamW(lr 3e-4, betas (0.9, 0.95), eps 1e-8,
weight decay 0.1 on tensors with >= 2 dims (matrices and embeddings), 0 on
biases and LayerNorm), implementation foreach=True by default (--optim-impl
picks fused or the plain for-loop). Data: uniformly random tokens (speed does
not depend on the values). A step = zero_grad + forward + backward +
optimizer step; the median step time is reported.
"""
import argparse
import json
import math
import os
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_util import add_shape_options, time_steps

# name: (n_layer, n_head, n_embd, seq_len, vocab) as in src/meshtrain/nn/gpt_config.cpp
PRESETS = {
    "gpt2": (12, 12, 768, 1024, 50257),
    "gpt2-medium": (24, 16, 1024, 1024, 50257),
    "gpt2-large": (36, 20, 1280, 1024, 50257),
    "gpt2-xl": (48, 25, 1600, 1024, 50257),
    "char-6L": (6, 6, 384, 256, 256),
    "char-2L": (2, 4, 128, 128, 256),
    "tiny": (2, 2, 16, 16, 61),
}


def pad_vocab(v):
    m = 128 if v > 1024 else 64
    return (v + m - 1) // m * m


class Block(nn.Module):
    """A pre-LayerNorm GPT-2 block; split_qkv: separate q, k, v projections in
    place of the fused c_attn (tools/peers/bench_tp_torch.py splits them by heads)."""

    def __init__(self, n_head, C, split_qkv=False):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        if split_qkv:
            self.q, self.k, self.v = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)
        else:
            self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return self.mlp_residual(x)

    def mlp_residual(self, x):
        """x plus the MLP of its LayerNorm."""
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, T, V):
        super().__init__()
        self.V, self.Vp = V, pad_vocab(V)
        self.wte = nn.Embedding(self.Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(H, C) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
        with torch.no_grad():
            self.wte.weight[V:].zero_()

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # tied head over the padded vocabulary
        return F.cross_entropy(logits[..., : self.V].reshape(-1, self.V), targets.reshape(-1))


def make_optimizer(model, impl):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    if impl == "fused":
        try:
            return torch.optim.AdamW(groups, fused=True, **kw), "fused"
        except (RuntimeError, TypeError) as e:
            print(f"fused AdamW unavailable ({e}); using foreach", file=sys.stderr)
            impl = "foreach"
    return torch.optim.AdamW(groups, foreach=(impl == "foreach"), **kw), impl


def build_gpt(preset, seq, optim_impl, device=None):
    """The preset's GPT, its AdamW and the implementation it got (make_optimizer),
    its parameter count and its model FLOPs per token at context seq (6N + 6LCT,
    N without the position embeddings as meshtrain counts it)."""
    L, H, C, T, V = PRESETS[preset]
    model = GPT(L, H, C, T, V)
    if device is not None:
        model.to(device)  # before the optimizer: fused AdamW runs where the parameters are
    opt, impl = make_optimizer(model, optim_impl)
    n_params = sum(p.numel() for p in model.parameters())
    return model, opt, impl, n_params, 6 * (n_params - T * C) + 6 * L * C * seq


def main():
    ap = argparse.ArgumentParser(description="PyTorch CPU training-step benchmark (meshtrain peer)")
    add_shape_options(ap, sorted(PRESETS), preset="char-6L", batch=8,
                      seq_help="context T (default: the preset's)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--compile", action="store_true", help="try torch.compile (falls back to eager)")
    ap.add_argument("--optim-impl", default="foreach", choices=["foreach", "fused", "loop"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the GPU peer: bench/cuda/train_vs_torch_gpu.py)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: forward and backward under torch.autocast, f32 master weights")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args()
    dev = torch.device(args.device)

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var) != str(args.threads):
            print(f"warning: {var}={os.environ.get(var)} (run with {var}={args.threads})",
                  file=sys.stderr)
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError as e:  # only allowed before any parallel work
        print(f"warning: could not set interop threads: {e}", file=sys.stderr)
    torch.manual_seed(args.seed)

    L, H, C, T, V = PRESETS[args.preset]
    seq = args.seq or T
    if seq > T:
        ap.error(f"--seq {seq} exceeds the preset's context {T}")
    model, opt, impl, n_params, flops_per_token = build_gpt(args.preset, seq, args.optim_impl, dev)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()} "
          f"(interop {torch.get_num_interop_threads()}), optimizer AdamW {impl}")
    print(f"model {args.preset}: L={L} H={H} C={C} T={T} V={V} (padded {model.Vp}), "
          f"{n_params / 1e6:.2f}M parameters; batch {args.batch} x {seq}")

    step_model = model
    compiled = False
    if args.compile:
        try:
            step_model = torch.compile(model)
            compiled = True
        except Exception as e:  # noqa: BLE001 - any failure means "use eager"
            print(f"torch.compile unavailable ({type(e).__name__}: {e}); using eager")

    gen = torch.Generator().manual_seed(args.seed)

    def step():
        data = torch.randint(0, V, (args.batch, seq + 1), generator=gen).to(dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = step_model(data[:, :-1], data[:, 1:])
        loss.backward()
        opt.step()
        return loss.item()

    def step_or_eager():
        nonlocal step_model, compiled
        try:
            return step()
        except Exception as e:  # noqa: BLE001 - compilation errors surface on the first call
            if not compiled:
                raise
            print(f"torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                  "using eager")
            step_model, compiled = model, False
            return step()

    times, cpu_times, loss = time_steps(step_or_eager, args.warmup, args.steps)
    if not times:
        return
    med = statistics.median(times)
    tok_s = args.batch * seq / med
    print(f"median {med * 1e3:.1f} ms/step, {tok_s:.0f} tokens/s, "
          f"{tok_s * flops_per_token / 1e9:.1f} GFLOP/s (model FLOPs, 6N + 6LCT per token)")
    if args.json:
        print(json.dumps({
            "peer": "pytorch", "torch_version": torch.__version__, "preset": args.preset,
            "batch": args.batch, "seq": seq, "threads": torch.get_num_threads(),
            "device": args.device, "precision": args.precision,
            "compiled": compiled, "optimizer": f"adamw-{impl}", "steps": len(times),
            "warmup": args.warmup, "ms_per_step_median": med * 1e3,
            "ms_per_step_mean": statistics.mean(times) * 1e3, "tokens_per_s": tok_s,
            "flops_per_token": flops_per_token, "model_gflops": tok_s * flops_per_token / 1e9,
            "final_loss": loss, "n_params": n_params,
            # CPU seconds of this process per step: tracks our own work on a shared machine.
            "cpu_ms_per_step": statistics.median(cpu_times) * 1e3,
            "tokens_per_cpu_s": args.batch * seq / statistics.median(cpu_times),
        }))


if __name__ == "__main__":
    main()
