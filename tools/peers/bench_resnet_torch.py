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
forward + backward + optimizer step; the median is reported.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="resnet-50", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--contiguous", action="store_true", help="NCHW instead of channels_last")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    bottleneck, layers, width, cin, image, classes, small = PRESETS[a.preset]
    model = ResNet(bottleneck, layers, width, cin, classes, small)
    fmt = torch.contiguous_format if a.contiguous else torch.channels_last
    model = model.to(memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    x = torch.randn(a.batch, cin, image, image).to(memory_format=fmt)
    y = torch.randint(0, classes, (a.batch,))
    fwd = torch.compile(model) if a.compile else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    log = (lambda s: print(s, file=sys.stderr)) if a.json else print
    times, cpu_times, loss = time_steps(step, a.warmup, a.steps, log)
    med = statistics.median(times)
    out = {"preset": a.preset, "batch": a.batch, "threads": a.threads, "precision": a.precision,
           "ms_per_step": med * 1e3, "samples_per_s": a.batch / med, "tokens_per_s": a.batch / med,
           "loss": loss, "torch_version": torch.__version__, "compile": a.compile,
           "memory_format": "contiguous" if a.contiguous else "channels_last"}
    print(json.dumps(out) if a.json else f"{a.preset} batch {a.batch}: {a.batch / med:.2f} images/s")


if __name__ == "__main__":
    main()
