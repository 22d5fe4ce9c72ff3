#!/usr/bin/env python3
"""PyTorch peer for `meshtrain bench train --preset resnet-*`: the same ResNet,
trained on CPU, timed per step.

  OMP_NUM_THREADS=1 python3 tools/peers/bench_resnet_torch.py --preset resnet-50 \
      --batch 16 --threads 1 --steps 4 --warmup 2

The model is torchvision's ResNet written in plain torch.nn (torchvision is not
a dependency): nn.Conv2d without bias, nn.BatchNorm2d, ReLU, the 7x7/2 stem with
a 3x3/2 max pool (or the small-input 3x3/1 stem without it), basic or
bottleneck blocks (stride on the 3x3, 1x1 downsampling), adaptive average
pooling and a linear classifier, same presets as src/meshtrain/nn/resnet_config.cpp.
Memory format channels_last (PyTorch's fast CPU path for convolutions) unless
--contiguous. Optimizer: torch.optim.AdamW(lr 3e-4, fused), as meshtrain's
bench (SGD would cost less per step but the step is small beside the
convolutions either way). --precision bf16: forward and backward under
torch.autocast(cpu, bfloat16) with f32 weights. --compile: the step's model
under torch.compile. Data: random images and labels. A step = zero_grad +
forward + backward + optimizer step; the median is reported. --nproc N: N
processes under DistributedDataParallel over gloo, each with its own batch;
a step is the slowest rank's, images/s counts all ranks.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_util import time_steps

# name: (bottleneck, layers, width, in_channels, image, classes, small_input)
PRESETS = {
    "resnet-18": (False, [2, 2, 2, 2], 64, 3, 224, 1000, False),
    "resnet-34": (False, [3, 4, 6, 3], 64, 3, 224, 1000, False),
    "resnet-50": (True, [3, 4, 6, 3], 64, 3, 224, 1000, False),
    "resnet-18-cifar": (False, [2, 2, 2, 2], 64, 3, 32, 10, True),
    "resnet-fashion": (False, [1, 1, 1], 16, 1, 28, 10, True),
    "resnet-tiny": (False, [1, 1], 4, 3, 8, 5, True),
}


class Block(nn.Module):
    def __init__(self, cin, planes, stride, bottleneck):
        super().__init__()
        exp = 4 if bottleneck else 1
        if bottleneck:
            shapes = [(cin, planes, 1, 1), (planes, planes, 3, stride), (planes, planes * exp, 1, 1)]
        else:
            shapes = [(cin, planes, 3, stride), (planes, planes, 3, 1)]
        self.convs = nn.ModuleList(nn.Conv2d(c, o, k, s, k // 2, bias=False) for c, o, k, s in shapes)
        self.bns = nn.ModuleList(nn.BatchNorm2d(o) for _, o, _, _ in shapes)
        self.downsample = None
        if stride != 1 or cin != planes * exp:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes * exp, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes * exp))

    def forward(self, x):
        y = x
        for i, (conv, bn) in enumerate(zip(self.convs, self.bns)):
            y = bn(conv(y))
            if i + 1 < len(self.convs):
                y = F.relu(y)
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, bottleneck, layers, width, cin, classes, small):
        super().__init__()
        k, s = (3, 1) if small else (7, 2)
        self.conv1 = nn.Conv2d(cin, width, k, s, k // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.pool = None if small else nn.MaxPool2d(3, 2, 1)
        blocks, ch, exp = [], width, 4 if bottleneck else 1
        for i, n in enumerate(layers):
            for j in range(n):
                blocks.append(Block(ch, width << i, 2 if (i > 0 and j == 0) else 1, bottleneck))
                ch = (width << i) * exp
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(ch, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if self.pool is not None:
            x = self.pool(x)
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def run(rank, a):
    """Trains and times on this process; with --nproc N, rank `rank` of a DDP (gloo) job:
    each rank its own random batch, DDP's default buckets and buffer broadcast (BN
    local to a rank, as meshtrain's model.sync_bn = false)."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    bottleneck, layers, width, cin, image, classes, small = PRESETS[a.preset]
    model = ResNet(bottleneck, layers, width, cin, classes, small)
    fmt = torch.contiguous_format if a.contiguous else torch.channels_last
    model = model.to(memory_format=fmt)
    if a.nproc > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(a.batch, cin, image, image, generator=gen).to(memory_format=fmt)
    y = torch.randint(0, classes, (a.batch,), generator=gen)
    fwd = torch.compile(model) if a.compile else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    quiet = a.json or rank > 0
    log = (lambda s: print(s, file=sys.stderr)) if quiet else print
    barrier = None
    if a.nproc > 1:
        import torch.distributed as dist
        barrier = dist.barrier
    times, cpu_times, loss = time_steps(step, a.warmup, a.steps, log, before=barrier)
    if a.nproc > 1:  # a step lasts as long as its slowest rank
        import torch.distributed as dist
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times = t.tolist()
    if rank > 0:
        return
    med = statistics.median(times)
    rate = a.nproc * a.batch / med
    out = {"preset": a.preset, "batch": a.batch, "threads": a.threads, "precision": a.precision,
           "nproc": a.nproc, "ms_per_step": med * 1e3, "samples_per_s": rate, "tokens_per_s": rate,
           "loss": loss, "torch_version": torch.__version__, "compile": a.compile,
           "memory_format": "contiguous" if a.contiguous else "channels_last"}
    print(json.dumps(out) if a.json else f"{a.preset} batch {a.batch} x {a.nproc}: {rate:.2f} images/s")


def ddp_worker(rank, a, port):
    import datetime
    import os
    import torch.distributed as dist
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc,
                            timeout=datetime.timedelta(seconds=1800))
    try:
        run(rank, a)
    finally:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="resnet-50", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=16, help="per rank")
    ap.add_argument("--threads", type=int, default=1, help="per rank")
    ap.add_argument("--nproc", type=int, default=1, help="ranks: N > 1 trains under DDP (gloo)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--contiguous", action="store_true", help="NCHW instead of channels_last")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.nproc <= 1:
        run(0, a)
        return
    import socket
    import torch.multiprocessing as mp
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(ddp_worker, args=(a, port), nprocs=a.nproc, join=True)


if __name__ == "__main__":
    main()
