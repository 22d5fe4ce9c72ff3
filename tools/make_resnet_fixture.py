#!/usr/bin/env python3
"""Regenerate the PyTorch reference fixture for meshtrain's ResNet.

Writes tests/fixtures/resnet_reference.safetensors, deterministically (fixed
seeds, float64 math on f32-rounded values, results stored as f32), for two
small ResNets in torchvision's layout and names (conv1/bn1, layerS.K.convI/
bnI, layerS.K.downsample.0/1, fc), written here in plain torch so that no
torchvision is needed:
  "basic."       basic blocks, layers [1, 1], width 4, 3x16x16 images, 5
                 classes, the ImageNet stem (7x7/2 convolution, 3x3/2 max pool)
  "bottleneck."  bottleneck blocks (expansion 4, stride on the 3x3), layers
                 [1, 1], width 2, 2x6x6 images, 7 classes, the small-input
                 stem (3x3/1, no pool)
For each case <c>: <c>param.<name> (every entry of the flat buffer, batch
norm's running statistics included), <c>input (B, C, H, W), <c>labels (B)
I32, then a training-mode forward (batch statistics; running statistics
updated with momentum 0.1 and the unbiased variance, as torch does):
<c>logits (B, classes), <c>loss (1,) the mean cross-entropy, <c>grad.<name>
for every trained parameter, <c>running.<name> the running statistics after
it, and <c>eval_logits: an evaluation-mode forward of the same images with
those updated running statistics. Batch norm eps 1e-5.
Then the same pass under meshtrain's bf16 mixed precision, <c>bf16.logits,
loss, grad.<name>, running.<name>, eval_logits (same parameters and images,
no new random draws): each convolution computes with its input and weight
rounded to bf16 (from f32, round to nearest even) and its backward with the
output gradient rounded too (both products), exactly, in float64; batch
norm, ReLU, pooling, the residual sums and the classifier stay float64.
Usage: python3 tools/make_resnet_fixture.py [--out-dir tests/fixtures]
"""
import argparse
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

SEED = 20261128
CASES = {
    # name: (bottleneck, layers, width, in_channels, image, classes, small_input, batch)
    "basic.": (False, [1, 1], 4, 3, 16, 5, False, 3),
    "bottleneck.": (True, [1, 1], 2, 2, 6, 7, True, 2),
}


def convs_of(bottleneck, layers, width, cin, small):
    """[(conv name, bn name, C, OC, K, stride)] in torchvision's order, and
    the blocks as (main convs, shortcut or None)."""
    convs = [("conv1", "bn1", cin, width, 3 if small else 7, 1 if small else 2)]
    blocks, ch, exp = [], width, 4 if bottleneck else 1
    for s, n in enumerate(layers):
        planes = width << s
        for k in range(n):
            stride = 2 if (s > 0 and k == 0) else 1
            pre = f"layer{s + 1}.{k}."
            if bottleneck:
                main = [(1, ch, planes, 1, 1), (2, planes, planes, 3, stride), (3, planes, planes * exp, 1, 1)]
            else:
                main = [(1, ch, planes, 3, stride), (2, planes, planes, 3, 1)]
            idx = []
            for i, c, oc, kk, st in main:
                idx.append(len(convs))
                convs.append((f"{pre}conv{i}", f"{pre}bn{i}", c, oc, kk, st))
            sc = None
            if stride != 1 or ch != planes * exp:
                sc = len(convs)
                convs.append((pre + "downsample.0", pre + "downsample.1", ch, planes * exp, 1, stride))
            blocks.append((idx, sc))
            ch = planes * exp
    return convs, blocks, ch


def make_params(gen, convs, features, classes):
    p = {}
    z = lambda *shape: torch.randn(shape, generator=gen, dtype=torch.float64)
    for conv, bn, c, oc, k, _ in convs:
        p[conv + ".weight"] = (0.5 / (c * k * k) ** 0.5) * z(oc, c, k, k)
        p[bn + ".weight"] = 1.0 + 0.1 * z(oc)
        p[bn + ".bias"] = 0.1 * z(oc)
        p[bn + ".running_mean"] = 0.1 * z(oc)
        p[bn + ".running_var"] = 1.0 + 0.1 * z(oc).abs()
    p["fc.weight"] = (1.0 / features ** 0.5) * z(classes, features)
    p["fc.bias"] = 0.1 * z(classes)
    return {n: t.float() for n, t in p.items()}  # the stored values


def to_bf16(t):
    """float64 -> f32 -> bf16 -> float64: the value meshtrain computes with."""
    return t.float().bfloat16().double()


class Bf16Conv(torch.autograd.Function):
    """A convolution on bf16-rounded operands whose backward rounds the output
    gradient to bf16 before both products (meshtrain's mixed precision)."""

    @staticmethod
    def forward(ctx, x, w, stride, pad):
        xr, wr = to_bf16(x), to_bf16(w)
        ctx.save_for_backward(xr, wr)
        ctx.stride, ctx.pad = stride, pad
        return F.conv2d(xr, wr, stride=stride, padding=pad)

    @staticmethod
    def backward(ctx, gy):
        xr, wr = ctx.saved_tensors
        g = to_bf16(gy)
        dx = torch.nn.grad.conv2d_input(xr.shape, wr, g, stride=ctx.stride, padding=ctx.pad)
        dw = torch.nn.grad.conv2d_weight(xr, wr.shape, g, stride=ctx.stride, padding=ctx.pad)
        return dx, dw, None, None


def conv2d(x, w, stride, pad, bf16):
    return Bf16Conv.apply(x, w, stride, pad) if bf16 else F.conv2d(x, w, stride=stride, padding=pad)


def forward(p, x, convs, blocks, small, training, bf16=False):
    def cbn(i, inp, relu):
        conv, bn, _, _, k, stride = convs[i]
        y = conv2d(inp, p[conv + ".weight"], stride, k // 2, bf16)
        y = F.batch_norm(y, p[bn + ".running_mean"], p[bn + ".running_var"], p[bn + ".weight"],
                         p[bn + ".bias"], training=training, momentum=0.1, eps=1e-5)
        return F.relu(y) if relu else y

    x = cbn(0, x, True)
    if not small:
        x = F.max_pool2d(x, 3, 2, 1)
    for main, sc in blocks:
        y = x
        for j, i in enumerate(main):
            y = cbn(i, y, j + 1 < len(main))
        x = F.relu(y + (cbn(sc, x, False) if sc is not None else x))
    return F.linear(x.mean(dim=(2, 3)), p["fc.weight"], p["fc.bias"])


def make_case(prefix, spec, gen):
    bottleneck, layers, width, cin, image, classes, small, B = spec
    convs, blocks, features = convs_of(bottleneck, layers, width, cin, small)
    params = make_params(gen, convs, features, classes)
    x = torch.randn((B, cin, image, image), generator=gen, dtype=torch.float64).float()
    labels = torch.randint(0, classes, (B,), generator=gen)
    out = {prefix + "param." + n: t for n, t in params.items()}
    out[prefix + "input"] = x
    out[prefix + "labels"] = labels.to(torch.int32)
    for bf16, pre in ((False, prefix), (True, prefix + "bf16.")):
        p = {n: t.double().clone().requires_grad_(not n.endswith(("running_mean", "running_var")))
             for n, t in params.items()}
        logits = forward(p, x.double(), convs, blocks, small, True, bf16)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        with torch.no_grad():
            eval_logits = forward(p, x.double(), convs, blocks, small, False, bf16)
        out[pre + "logits"] = logits.detach().float()
        out[pre + "loss"] = loss.detach().float().reshape(1)
        out[pre + "eval_logits"] = eval_logits.float()
        for n, t in p.items():
            if t.requires_grad:
                out[pre + "grad." + n] = t.grad.float()
            else:
                out[pre + "running." + n] = t.detach().float()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(SEED)
    tensors = {}
    for prefix, spec in CASES.items():
        tensors.update(make_case(prefix, spec, gen))
    path = os.path.join(args.out_dir, "resnet_reference.safetensors")
    save_file({n: t.contiguous() for n, t in tensors.items()}, path)
    print(f"wrote {path} ({len(tensors)} tensors)")


if __name__ == "__main__":
    main()
