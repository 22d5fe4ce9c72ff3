#!/usr/bin/env python3
"""PyTorch peer for meshtrain's pipeline parallelism (bench/pp_vs_torch.py):
torch.distributed.pipelining (PipelineStage with ScheduleGPipe,
Schedule1F1B, or ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble
over --chunks stages per rank) over gloo, one CPU process per rank, one
thread each by default, training the GPT of tools/peers/bench_train_torch.py
cut into contiguous layer ranges like meshtrain's pipeline_shards (the first
stage embeds, the last holds ln_f and the head). torch's pipelining cannot
tie a parameter across ranks, so the last stage's head is its own copy of
wte (the same FLOPs; meshtrain adds the two copies' gradients, an exchange
this peer skips). A step = zero_grad + the schedule over the micro-batches
+ AdamW.

  python3 tools/peers/bench_pp_torch.py --preset char-6L --seq 256 --micro-batch 1 \\
      --micro-batches 8 --schedule 1f1b --json
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

from bench_train_torch import GPT, PRESETS, make_optimizer


class FirstStage(nn.Module):
    def __init__(self, gpt, blocks):
        super().__init__()
        self.wte, self.wpe, self.h = gpt.wte, gpt.wpe, nn.ModuleList(blocks)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
        for b in self.h:
            x = b(x)
        return x


class LastStage(nn.Module):
    def __init__(self, gpt, blocks):
        super().__init__()
        self.h, self.ln_f = nn.ModuleList(blocks), gpt.ln_f
        self.head = nn.Parameter(gpt.wte.weight.detach().clone())  # untied copy (see above)

    def forward(self, x):
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.head.T


class MiddleStage(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.h = nn.ModuleList(blocks)

    def forward(self, x):
        for b in self.h:
            x = b(x)
        return x


def stage_module(gpt, rank, n):
    """Stage `rank` of n: layers cut as meshtrain's pipeline_shards (the first ranges longer)."""
    L = len(gpt.h)
    sizes = [L // n + (1 if s < L % n else 0) for s in range(n)]
    begin = sum(sizes[:rank])
    blocks = list(gpt.h[begin:begin + sizes[rank]])
    if rank == 0:
        return FirstStage(gpt, blocks)
    return LastStage(gpt, blocks) if rank == n - 1 else MiddleStage(blocks)


def worker(rank, args, out_q):
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble)

    torch.set_num_threads(args.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.nproc)
    torch.manual_seed(0)
    L, H, C, T, V = PRESETS[args.preset]
    seq = args.seq or T
    gpt = GPT(L, H, C, T, V)
    p = args.nproc
    looped = {"interleaved": ScheduleInterleaved1F1B, "zero-bubble": ScheduleInterleavedZeroBubble}
    v = args.chunks if args.schedule in looped else 1
    # Virtual stage c * p + rank on this rank, as meshtrain's chunks.
    modules = [stage_module(gpt, c * p + rank, v * p) for c in range(v)]
    opt, impl = make_optimizer(nn.ModuleList(modules), args.optim_impl)
    stages = [PipelineStage(m, c * p + rank, v * p, torch.device("cpu")) for c, m in enumerate(modules)]

    def loss_fn(logits, target):
        return F.cross_entropy(logits[..., :V].reshape(-1, V), target.reshape(-1))

    if args.schedule in looped:
        schedule = looped[args.schedule](stages, n_microbatches=args.micro_batches, loss_fn=loss_fn)
    else:
        kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[args.schedule]
        schedule = kind(stages[0], n_microbatches=args.micro_batches, loss_fn=loss_fn)
    batch = args.micro_batch * args.micro_batches
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, V, (batch, seq), generator=g)
    tgt = torch.randint(0, V, (batch, seq), generator=g)
    last = rank == args.nproc - 1

    def step():
        opt.zero_grad(set_to_none=True)
        losses = []
        if rank == 0:
            schedule.step(idx)
        elif last:
            schedule.step(target=tgt, losses=losses)
        else:
            schedule.step()
        opt.step()
        return float(torch.stack(losses).detach().mean()) if losses else float("nan")

    times = []
    for i in range(args.warmup + args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        loss = step()
        dist.barrier()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    if last:
        med = statistics.median(times)
        out_q.put({"peer": f"torch.distributed.pipelining {args.schedule}", "torch_version": torch.__version__,
                   "preset": args.preset, "nproc": args.nproc, "schedule": args.schedule,
                   "micro_batch": args.micro_batch, "micro_batches": args.micro_batches, "seq": seq,
                   "threads": args.threads, "optimizer": impl, "ms_per_step_median": med * 1e3,
                   "tokens_per_s": batch * seq / med, "loss": loss})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="char-6L", choices=sorted(PRESETS))
    ap.add_argument("--seq", type=int, default=0, help="context (0: the preset's)")
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b", "interleaved", "zero-bubble"],
                    help="zero-bubble: ScheduleInterleavedZeroBubble over --chunks stages per rank")
    ap.add_argument("--chunks", type=int, default=2, help="model chunks per rank (interleaved)")
    ap.add_argument("--nproc", type=int, default=2, help="pipeline stages, one process each")
    ap.add_argument("--threads", type=int, default=1, help="threads per stage")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--optim-impl", default="foreach", choices=["foreach", "fused", "for-loop"])
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    q = mp.get_context("spawn").Queue()
    mp.spawn(worker, args=(args, q), nprocs=args.nproc, join=True)
    r = q.get()
    print(f"torch {r['torch_version']} {r['preset']} pp {r['nproc']} {r['schedule']}: median "
          f"{r['ms_per_step_median']:.1f} ms/step, {r['tokens_per_s']:.0f} tokens/s, loss {r['loss']:.3f}")
    if args.json:
        print(json.dumps(r))


if __name__ == "__main__":
    sys.exit(main())
