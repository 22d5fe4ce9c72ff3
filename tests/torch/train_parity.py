"""Trains a small GPT-like model 10 steps with PyTorch DDP or FSDP2 on the
given backend and writes rank 0's losses (and a parameter checksum) as JSON:
tests/torch/train_parity.sh runs it on "meshtrain" and on "gloo" and compares.

    torchrun --nproc-per-node 2 train_parity.py --backend meshtrain --mode ddp --out losses.json
"""
import argparse
import json

import torch
import torch.distributed as dist
import torch.nn as nn

import meshtrain.torch  # noqa: F401


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=96, d=64, layers=2, heads=4, seq=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for b in self.blocks:
            x = b(x, self.mask[:t, :t])
        return self.head(self.ln(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", required=True)
    p.add_argument("--mode", choices=["ddp", "fsdp"], required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = TinyGPT()
    if a.mode == "ddp":
        # Small buckets: several reductions overlap the backward through futures.
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.05)
    else:
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (world,))
        for b in model.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(a.steps):
        # Learnable sequences: a random start and stride, then counting on.
        start, stride = torch.randint(0, 96, (4, 1), generator=gen), torch.randint(1, 4, (4, 1), generator=gen)
        idx = (start + stride * torch.arange(33)) % 96
        logits = model(idx[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 96), idx[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        losses.append(avg.item() / world)
    total = sum(float((t.full_tensor() if hasattr(t, "full_tensor") else t).detach().double().sum())
                for t in model.parameters())
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"losses": losses, "param_sum": total}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
