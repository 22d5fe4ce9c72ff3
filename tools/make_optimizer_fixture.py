#!/usr/bin/env python3
"""Regenerate the reference fixture for meshtrain's optimizers (SGD, LARS, LAMB).

Writes tests/fixtures/optimizer_reference.safetensors, deterministically. Four
parameter tensors laid out in one flat buffer, in this order:
  "w1" (8, 6) matrix: decayed and adapted
  "b1" (6,)   bias: excluded (no weight decay, no trust ratio)
  "w2" (5, 7) matrix: decayed and adapted
  "z"  (4,)   a matrix-like tensor that starts at zero (its trust ratio is 1)
Three steps with learning rates LRS and gradient scales SCALES (the kernel
multiplies the gradient by the scale first, as clipping does); gradients
random. Stored: init.<t>, grad.<s>.<t> (f32), and for each case <c>:
<c>.param.<t> after the three steps and <c>.<state>.<t> (the optimizer state
under meshtrain's names: momentum, exp_avg, exp_avg_sq).
  sgd, sgd_nesterov  PyTorch's torch.optim.SGD itself, in float32, with two
                     parameter groups (decay on w1, w2, z; none on b1)
  lars               NVIDIA LARC over SGD, written here in float64 on the f32
                     inputs and hyperparameters (rounded to f32 as meshtrain holds them)
  lamb               You et al. 2020 (bias-corrected Adam moments, trust ratio
                     ||w|| / ||u|| clipped at TRUST_CLIP), float64
Usage: python3 tools/make_optimizer_fixture.py [--out-dir tests/fixtures]
"""
import argparse
import os

import torch
from safetensors.torch import save_file

SEED = 20261128
SHAPES = {"w1": (8, 6), "b1": (6,), "w2": (5, 7), "z": (4,)}
EXCLUDED = {"b1"}


def f32(x):
    """x as meshtrain holds it: hyperparameters and learning rates are f32."""
    return torch.tensor(x, dtype=torch.float32).item()


LRS = [f32(x) for x in (0.1, 0.05, 0.02)]
SCALES = [1.0, 0.5, 1.0]
MOMENTUM, WD = f32(0.9), f32(0.01)
ETA, LARS_EPS = f32(0.02), f32(1e-8)
BETA1, BETA2, LAMB_EPS, TRUST_CLIP = f32(0.9), f32(0.999), f32(1e-6), 10.0


def inputs():
    g = torch.Generator().manual_seed(SEED)
    init = {}
    for name, shape in SHAPES.items():
        init[name] = torch.zeros(shape) if name == "z" else torch.randn(shape, generator=g) * 0.5
    grads = [{n: torch.randn(s, generator=g) * 0.1 for n, s in SHAPES.items()} for _ in LRS]
    return init, grads


def torch_sgd(init, grads, nesterov):
    params = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    groups = [{"params": [params[n] for n in SHAPES if n not in EXCLUDED], "weight_decay": WD},
              {"params": [params[n] for n in SHAPES if n in EXCLUDED], "weight_decay": 0.0}]
    opt = torch.optim.SGD(groups, lr=LRS[0], momentum=MOMENTUM, nesterov=nesterov)
    for step, lr in enumerate(LRS):
        for group in opt.param_groups:
            group["lr"] = lr
        for n, p in params.items():
            p.grad = grads[step][n] * SCALES[step]
        opt.step()
    out = {}
    for n, p in params.items():
        out[f"param.{n}"] = p.detach().clone()
        out[f"momentum.{n}"] = opt.state[p]["momentum_buffer"].clone()
    return out


def lars(init, grads):
    p = {n: t.double() for n, t in init.items()}
    buf = {}
    for step, lr in enumerate(LRS):
        for n in SHAPES:
            g = grads[step][n].double() * SCALES[step]
            if n in EXCLUDED:
                d = g
            else:
                wn, gn = p[n].norm(), g.norm()
                trust = ETA * wn / (gn + WD * wn + LARS_EPS) if wn > 0 and gn > 0 else 1.0
                d = (g + WD * p[n]) * trust
            buf[n] = d.clone() if step == 0 else MOMENTUM * buf[n] + d
            p[n] = p[n] - lr * buf[n]
    out = {}
    for n in SHAPES:
        out[f"param.{n}"] = p[n].float()
        out[f"momentum.{n}"] = buf[n].float()
    return out


def lamb(init, grads):
    p = {n: t.double() for n, t in init.items()}
    m = {n: torch.zeros_like(t) for n, t in p.items()}
    v = {n: torch.zeros_like(t) for n, t in p.items()}
    for step, lr in enumerate(LRS):
        t = step + 1
        for n in SHAPES:
            g = grads[step][n].double() * SCALES[step]
            m[n] = BETA1 * m[n] + (1 - BETA1) * g
            v[n] = BETA2 * v[n] + (1 - BETA2) * g * g
            mhat, vhat = m[n] / (1 - BETA1**t), v[n] / (1 - BETA2**t)
            wd = 0.0 if n in EXCLUDED else WD
            u = mhat / (vhat.sqrt() + LAMB_EPS) + wd * p[n]
            ratio = 1.0
            if n not in EXCLUDED:
                wn, un = p[n].norm(), u.norm()
                if wn > 0 and un > 0:
                    ratio = min(float(wn / un), TRUST_CLIP)
            p[n] = p[n] - lr * ratio * u
    out = {}
    for n in SHAPES:
        out[f"param.{n}"] = p[n].float()
        out[f"exp_avg.{n}"] = m[n].float()
        out[f"exp_avg_sq.{n}"] = v[n].float()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default="tests/fixtures")
    args = ap.parse_args()
    init, grads = inputs()
    tensors = {f"init.{n}": t for n, t in init.items()}
    for s, step in enumerate(grads):
        for n, t in step.items():
            tensors[f"grad.{s}.{n}"] = t
    cases = {"sgd": torch_sgd(init, grads, False), "sgd_nesterov": torch_sgd(init, grads, True),
             "lars": lars(init, grads), "lamb": lamb(init, grads)}
    for c, results in cases.items():
        for k, t in results.items():
            tensors[f"{c}.{k}"] = t
    tensors = {k: v.float().contiguous() for k, v in tensors.items()}
    path = os.path.join(args.out_dir, "optimizer_reference.safetensors")
    save_file(tensors, path)
    print(f"wrote {path}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
