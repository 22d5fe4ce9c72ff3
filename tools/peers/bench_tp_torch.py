#!/usr/bin/env python3
"""PyTorch peer for `meshtrain bench train --preset P --nproc N --tp T`:
PyTorch's own tensor parallelism (torch.distributed.tensor.parallel) on the
same Llama or GPT shapes, N CPU processes over gloo, one thread each by
default.

  python3 tools/peers/bench_tp_torch.py --preset llama-wide --nproc 2 --tp 2 \\
      --batch 4 --seq 128 --threads 1 --steps 6 --warmup 2
  python3 tools/peers/bench_tp_torch.py --preset gpt-wide ...

GPT (gpt-* presets): as tools/peers/bench_train_torch.py with q, k, v as
separate biased projections (ColwiseParallel by heads, like meshtrain's
split of the fused c_attn), c_fc ColwiseParallel, both projections
RowwiseParallel (their biases added after the reduction), LayerNorms and the
position table replicated; the embedding and the head are two vocabulary-
parallel (Shard(0)) tensors, not one tied tensor, as parallelize_module
shards modules one at a time (the peer does a little more optimizer work).

Model: as tools/peers/bench_llama_torch.py, with q, k, v and gate, up as
separate projections so the plan can split them by heads / width:
ColwiseParallel for q, k, v, gate, up; RowwiseParallel for o and down (the
Megatron layout meshtrain uses); the embedding RowwiseParallel (vocabulary-
parallel) and the head ColwiseParallel with its logits left sharded and the
loss computed under loss_parallel() (no gather of the logits). Attention:
F.scaled_dot_product_attention on the local heads (enable_gqa). With
--nproc > --tp the remaining factor is data parallelism: a 2-D mesh
(dp, tp) and the gradients averaged over dp with all_reduce after backward.
Optimizer: AdamW (foreach; the fused CPU kernel does not take DTensors),
lr 3e-4, betas (0.9, 0.95), weight decay 0.1 on 2-D tensors. Reported:
tokens/s of the whole job (batch x seq x dp per step / median step time).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_llama_torch import Llama, RMSNorm, pad_vocab, rotate  # noqa: E402
from bench_train_torch import Block  # noqa: E402
from peer_util import add_shape_options  # noqa: E402

GPT_PRESETS = {
    # (n_layer, n_head, n_embd, seq_len, vocab) as in src/meshtrain/nn/gpt_config.cpp
    "gpt-wide": (2, 16, 1024, 256, 8192),
    "char-6L": (6, 6, 384, 256, 256),
}

PRESETS = {
    # as in src/meshtrain/nn/llama_config.cpp
    "llama-tiny": (2, 4, 2, 16, 40, 16, 61, 1e4),
    "llama-char": (6, 6, 2, 384, 1024, 256, 256, 1e4),
    "llama-wide": (2, 16, 8, 1024, 2816, 256, 8192, 1e4),
    "llama-100m": (12, 12, 4, 768, 2048, 1024, 50257, 1e4),
}


class TPBlock(nn.Module):
    def __init__(self, H, KV, C, F_):
        super().__init__()
        self.hd = C // H
        self.ln1 = RMSNorm(C)
        self.q = nn.Linear(C, C, bias=False)
        self.k = nn.Linear(C, KV * self.hd, bias=False)
        self.v = nn.Linear(C, KV * self.hd, bias=False)
        self.o = nn.Linear(C, C, bias=False)
        self.ln2 = RMSNorm(C)
        self.gate = nn.Linear(C, F_, bias=False)
        self.up = nn.Linear(C, F_, bias=False)
        self.down = nn.Linear(F_, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.ln1(x)
        # Local heads: the column-parallel outputs hold this rank's heads.
        q = rotate(self.q(h).view(B, T, -1, self.hd).transpose(1, 2), cos, sin)
        k = rotate(self.k(h).view(B, T, -1, self.hd).transpose(1, 2), cos, sin)
        v = self.v(h).view(B, T, -1, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])
        x = x + self.o(y.transpose(1, 2).reshape(B, T, -1))
        h = self.ln2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class GPTTPBlock(Block):
    """bench_train_torch.py's block with q, k, v split, attending over this rank's heads."""

    def __init__(self, H, C):
        super().__init__(H, C, split_qkv=True)
        self.hd = C // H

    def forward(self, x):
        B, T, _ = x.shape
        h = self.ln_1(x)
        q, k, v = (m(h).view(B, T, -1, self.hd).transpose(1, 2) for m in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, -1))
        return self.mlp_residual(x)


class GPTTP(nn.Module):
    def __init__(self, L, H, C, T, V):
        super().__init__()
        self.embed = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.layers = nn.ModuleList(GPTTPBlock(H, C) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.head = nn.Linear(C, V, bias=False)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)

    def logits(self, idx):
        T = idx.shape[1]
        x = self.embed(idx) + self.wpe.weight[:T]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln_f(x))


def build(preset):
    """The model, its tensor-parallel plan (module name -> style) and its vocabulary."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    plan = {
        "embed": RowwiseParallel(input_layouts=Replicate()),
        "head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
    }
    if preset in GPT_PRESETS:
        L, H, C, T, V = GPT_PRESETS[preset]
        model = GPTTP(L, H, C, T, V)
        cols, rows = ("q", "k", "v", "c_fc"), ("c_proj", "mlp_proj")
    else:
        L, H, KV, C, F_, T, V, theta = PRESETS[preset]
        model = Llama(L, H, KV, C, F_, T, V, theta, block=TPBlock)
        cols, rows = ("q", "k", "v", "gate", "up"), ("o", "down")
    for i in range(L):
        for name in cols:
            plan[f"layers.{i}.{name}"] = ColwiseParallel()
        for name in rows:
            plan[f"layers.{i}.{name}"] = RowwiseParallel()
    return model, plan, V, T


def worker(rank, args, out_q):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.nproc)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module
    dp = args.nproc // args.tp
    mesh = init_device_mesh("cpu", (dp, args.tp), mesh_dim_names=("dp", "tp"))
    tp_mesh = mesh["tp"]
    torch.manual_seed(1)
    model, plan, V, T = build(args.preset)
    assert V == pad_vocab(V), "the loss_parallel peer needs an unpadded vocabulary"
    seq = args.seq or T
    parallelize_module(model, tp_mesh, plan)
    # foreach kernels take lists of one kind: sharded (DTensor) and replicated
    # (plain) parameters in separate groups, each with or without decay.
    groups = {}
    for p in model.parameters():
        groups.setdefault((hasattr(p, "to_local"), p.dim() >= 2), []).append(p)
    opt = torch.optim.AdamW([{"params": ps, "weight_decay": 0.1 if decay else 0.0}
                             for (_, decay), ps in groups.items()],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    dp_group = mesh["dp"].get_group() if dp > 1 else None
    gen = torch.Generator().manual_seed(1 + mesh.get_local_rank("dp"))

    def step():
        data = torch.randint(0, V, (args.batch, seq + 1), generator=gen)
        opt.zero_grad(set_to_none=True)
        logits = model.logits(data[:, :-1])
        with loss_parallel():
            loss = F.cross_entropy(logits.reshape(-1, V), data[:, 1:].reshape(-1))
            loss.backward()
        if dp_group is not None:
            for p in model.parameters():
                g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                dist.all_reduce(g, group=dp_group)
                g.div_(dp)
        opt.step()
        return loss.full_tensor().item() if hasattr(loss, "full_tensor") else loss.item()

    times = []
    for i in range(args.warmup + args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        loss = step()
        dist.barrier()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        med = statistics.median(times)
        out_q.put({"peer": "pytorch-tp", "torch_version": torch.__version__, "preset": args.preset,
                   "nproc": args.nproc, "tp": args.tp, "batch": args.batch, "seq": seq,
                   "threads": args.threads, "ms_per_step_median": med * 1e3,
                   "tokens_per_s": args.batch * seq * dp / med, "loss": loss})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description="PyTorch tensor-parallel CPU Llama/GPT training step (meshtrain peer)")
    add_shape_options(ap, sorted(PRESETS) + sorted(GPT_PRESETS), preset="llama-wide", batch=4)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    assert args.nproc % args.tp == 0, "--tp must divide --nproc"
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.spawn(worker, args=(args, q), nprocs=args.nproc, join=True)
    r = q.get()
    print(f"torch {r['torch_version']} {r['preset']} nproc {r['nproc']} tp {r['tp']}: median "
          f"{r['ms_per_step_median']:.1f} ms/step, {r['tokens_per_s']:.0f} tokens/s, loss {r['loss']:.3f}")
    if args.json:
        print(json.dumps(r))


if __name__ == "__main__":
    sys.exit(main())
