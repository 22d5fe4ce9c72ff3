#!/usr/bin/env python3
"""PyTorch DDP and FSDP2 training steps on the "meshtrain" backend against
gloo: the same script, model, data and threads, only the backend name
changed, the two alternating run by run. Prints tokens/s medians and ratios.

  python bench/torch_ddp.py [--mode ddp fsdp] [--rounds 3] [--layers 12 --dim 768 --seq 128]

Default model: GPT-2 small's shape (12 layers, 768 wide, 12 heads, vocab
50304), 2 ranks x 1 thread, batch 1 x 128 tokens per rank, AdamW
(foreach), DDP with its default 25 MB buckets; FSDP2 shards each block.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(a):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import meshtrain.torch  # noqa: F401

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
            self.heads = heads

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
            y = nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                           v.transpose(1, 2), is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(a.vocab, a.dim), nn.Embedding(a.seq, a.dim)
            self.blocks = nn.ModuleList(Block(a.dim, a.heads) for _ in range(a.layers))
            self.ln = nn.LayerNorm(a.dim)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.ln(x) @ self.wte.weight.t()

    torch.set_num_threads(a.threads)
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = GPT()
    if a.mode == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for blk in model.blocks:
            fully_shard(blk, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    gen = torch.Generator().manual_seed(rank)
    times = []
    for step in range(a.warmup + a.steps):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)
        start = time.perf_counter()
        logits = model(idx[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, a.vocab), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dist.barrier()
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    if rank == 0:
        ms = statistics.median(times) * 1e3
        print(json.dumps({"ms_per_step": ms, "tokens_per_s": world * a.batch * a.seq / ms * 1e3}))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", nargs="+", default=["ddp", "fsdp"], choices=["ddp", "fsdp"])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads),
               PYTHONPATH=os.path.join(ROOT, "build", "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    shape = [f"--{k}={getattr(a, k)}" for k in ("threads", "steps", "warmup", "layers", "dim", "heads", "vocab",
                                                 "seq", "batch")]
    results = {(m, b): [] for m in a.mode for b in ("meshtrain", "gloo")}
    for r in range(a.rounds):
        line = f"round {r + 1}:"
        for mode in a.mode:
            for backend in ("meshtrain", "gloo"):
                out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                      "--nproc-per-node", str(a.nproc), os.path.abspath(__file__), "--worker",
                                      "--mode", mode, "--backend", backend] + shape,
                                     env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    sys.stderr.write(out.stdout + out.stderr)
                    return 1
                rec = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
                results[(mode, backend)].append(rec["tokens_per_s"])
                line += f" {mode}/{backend} {rec['tokens_per_s']:.1f} tok/s ({rec['ms_per_step']:.0f} ms)"
        print(line, flush=True)
    print()
    print(f"{a.layers} layers x {a.dim}, vocab {a.vocab}, {a.nproc} ranks x {a.threads} thread, batch {a.batch} x "
          f"{a.seq} per rank, medians of {a.rounds} alternating rounds ({a.steps} timed steps each)")
    print("| mode | meshtrain tok/s | gloo tok/s | meshtrain / gloo |")
    print("|---|---|---|---|")
    for mode in a.mode:
        ours, theirs = (statistics.median(results[(mode, b)]) for b in ("meshtrain", "gloo"))
        print(f"| {mode} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
