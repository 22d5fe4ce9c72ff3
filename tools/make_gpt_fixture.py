#!/usr/bin/env python3
"""Regenerate the PyTorch reference fixtures for the `tiny` GPT preset.

Writes, deterministically (fixed seeds, float64 math, same files every run on
a given machine):
  tests/fixtures/gpt_tiny_reference.safetensors
      parameters under meshtrain's names and (out, in) layout (wte padded to
      Vp = 64 rows, padding rows zero), and for each case a batch with its
      reference results:
        <case>inputs (B,T) I32, <case>targets (B,T) I32 (-1 = ignored),
        <case>logits (B,T,Vp), <case>losses (B,T) (0 where ignored),
        <case>loss (1,), <case>grad.<param name> for every parameter
      with cases "" (B=3, T=16, the full context), "t11." (B=2, T=11, shorter
      than the context) and "masked." (B=2, T=16, some targets -1).
  tests/fixtures/gpt_tiny_hf.safetensors
      the same weights under Hugging Face GPT-2 names: Conv1D weights stored
      (in, out), wte with the real V = 61 rows, metadata {"format": "pt"}.
  tests/fixtures/safetensors_library_sample.safetensors
      a few small tensors of several dtypes written by the safetensors library
      itself (the two files above come from a byte-stable writer here).

The model is GPT-2: learned token and position embeddings; pre-LayerNorm
blocks (ln_1 -> causal self-attention (c_attn 3C, c_proj) -> residual; ln_2 ->
MLP (c_fc 4C, tanh-approximated GELU, c_proj) -> residual); final ln_f;
LayerNorm eps 1e-5; output head tied to wte, giving logits over all Vp
columns as llm.c does. Like llm.c, the softmax/cross-entropy covers only the
real V columns (the padding columns do not enter the loss, so the padding
rows of wte get zero gradient). The loss is the mean over positions whose
target is >= 0.

Weights are drawn once, rounded to f32 (that is what the file stores), and
all reference math runs in float64 on those f32 values; results are stored as
f32. Usage: python3 tools/make_gpt_fixture.py [--out-dir tests/fixtures]
"""
import argparse
import json
import math
import os
import struct

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

# The `tiny` preset (src/meshtrain/nn/gpt_config.cpp).
L, H, C, T, V = 2, 2, 16, 16, 61
VP = 64  # pad_vocab(61)
SEED = 20240601

# Hugging Face Conv1D weights, stored (in, out).
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def param_shapes():
    """(name, shape) in meshtrain's flat-buffer order, matrices (out, in)."""
    out = [("wte.weight", (VP, C)), ("wpe.weight", (T, C))]
    for l in range(L):
        h = f"h.{l}."
        out += [
            (h + "ln_1.weight", (C,)), (h + "ln_1.bias", (C,)),
            (h + "attn.c_attn.weight", (3 * C, C)), (h + "attn.c_attn.bias", (3 * C,)),
            (h + "attn.c_proj.weight", (C, C)), (h + "attn.c_proj.bias", (C,)),
            (h + "ln_2.weight", (C,)), (h + "ln_2.bias", (C,)),
            (h + "mlp.c_fc.weight", (4 * C, C)), (h + "mlp.c_fc.bias", (4 * C,)),
            (h + "mlp.c_proj.weight", (C, 4 * C)), (h + "mlp.c_proj.bias", (C,)),
        ]
    out += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return out


def make_params(gen):
    """Weights N(0, 0.02); biases N(0, 0.05) and LayerNorm gains 1 + N(0, 0.1),
    so that every gradient path carries a nonzero, non-trivial value."""
    params = {}
    for name, shape in param_shapes():
        z = torch.randn(shape, generator=gen, dtype=torch.float64)
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            p = 1.0 + 0.1 * z
        elif name.endswith(".bias"):
            p = 0.05 * z
        else:
            p = 0.02 * z
        if name == "wte.weight":
            p[V:] = 0.0  # padding rows stay zero
        params[name] = p.to(torch.float32)  # the stored values
    return params


def forward(p, idx, targets):
    """Returns (logits (B,T,VP), per-position losses (B,T), mean loss), all float64."""
    B, Tb = idx.shape
    hd = C // H
    x = p["wte.weight"][idx] + p["wpe.weight"][:Tb]
    causal = torch.ones(Tb, Tb, dtype=torch.bool).tril()
    for l in range(L):
        g = lambda n: p[f"h.{l}.{n}"]
        h = F.layer_norm(x, (C,), g("ln_1.weight"), g("ln_1.bias"), eps=1e-5)
        qkv = h @ g("attn.c_attn.weight").T + g("attn.c_attn.bias")
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, Tb, H, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, Tb, C)
        x = x + y @ g("attn.c_proj.weight").T + g("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), g("ln_2.weight"), g("ln_2.bias"), eps=1e-5)
        h = F.gelu(h @ g("mlp.c_fc.weight").T + g("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ g("mlp.c_proj.weight").T + g("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    logits = x @ p["wte.weight"].T
    losses = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1),
                             ignore_index=-1, reduction="none").view(B, Tb)
    valid = (targets >= 0).sum()
    return logits, losses, losses.sum() / valid


def reference_case(params32, idx, targets, dtype=torch.float64):
    p = {n: t.detach().to(dtype).clone().requires_grad_(True) for n, t in params32.items()}
    logits, losses, loss = forward(p, idx.long(), targets.long())
    loss.backward()
    out = {
        "inputs": idx.to(torch.int32),
        "targets": targets.to(torch.int32),
        "logits": logits.detach().float(),
        "losses": losses.detach().float(),
        "loss": loss.detach().float().reshape(1),
    }
    for name, t in p.items():
        out["grad." + name] = t.grad.float()
    return out


def make_cases(gen):
    cases = {}
    idx = torch.randint(0, V, (3, T), generator=gen)
    tgt = torch.randint(0, V, (3, T), generator=gen)
    cases[""] = (idx, tgt)
    idx = torch.randint(0, V, (2, 11), generator=gen)
    tgt = torch.randint(0, V, (2, 11), generator=gen)
    cases["t11."] = (idx, tgt)
    idx = torch.randint(0, V, (2, T), generator=gen)
    tgt = torch.randint(0, V, (2, T), generator=gen)
    tgt[0, 3] = tgt[0, 15] = tgt[1, 0] = -1
    tgt[1, 7:10] = -1
    cases["masked."] = (idx, tgt)
    return cases


def hf_layout(params32):
    out = {}
    for name, t in params32.items():
        if name == "wte.weight":
            t = t[:V]
        elif name.endswith(CONV1D):
            t = t.T
        out[name] = t.contiguous()
    return out


def save_deterministic(tensors, path, metadata):
    """safetensors.torch.save_file writes its JSON header in hash-map order,
    which changes from run to run; this writer fixes the order (tensors sorted
    by name, data in that order) so regenerated fixtures are byte-identical.
    The result is checked with the reference reader."""
    names = sorted(tensors)
    dtypes = {torch.float32: "F32", torch.int32: "I32"}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for n in names:
        t = tensors[n].contiguous()
        data = t.numpy().tobytes()
        header[n] = {"dtype": dtypes[t.dtype], "shape": list(t.shape),
                     "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    back = load_file(path)
    assert sorted(back) == names and all(torch.equal(back[n], tensors[n]) for n in names)


def write_library_sample(path):
    """A small file written by the safetensors library itself, so the C++
    reader is tested against the reference writer. Its header order varies
    between runs, so an existing file with the same contents is kept."""
    tensors = {
        "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5,
        "bf16": torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16),
        "f16": torch.tensor([[1.5], [-0.25]], dtype=torch.float16),
        "i32": torch.tensor([-7, 8], dtype=torch.int32),
        "i64": torch.tensor([1 << 40], dtype=torch.int64),
        "u8": torch.tensor([255, 0, 7], dtype=torch.uint8),
        "f64": torch.tensor([1.0 / 3.0], dtype=torch.float64),
    }
    meta = {"written_by": "safetensors.torch.save_file"}
    if os.path.exists(path):
        old = load_file(path)
        with safe_open(path, "pt") as f:
            old_meta = f.metadata()
        if old_meta == meta and sorted(old) == sorted(tensors) and all(
                old[k].dtype == v.dtype and torch.equal(old[k], v) for k, v in tensors.items()):
            return
    save_file(tensors, path, metadata=meta)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out-dir", default=os.path.join(here, "..", "tests", "fixtures"))
    ap.add_argument("--report-f32", action="store_true",
                    help="also report how far a float32 PyTorch run lands from the reference")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)

    gen = torch.Generator().manual_seed(SEED)
    params32 = make_params(gen)
    cases = make_cases(gen)

    tensors = dict(params32)
    for prefix, (idx, tgt) in cases.items():
        for k, v in reference_case(params32, idx, tgt).items():
            tensors[prefix + k] = v
        if args.report_f32:
            f32 = reference_case(params32, idx, tgt, dtype=torch.float32)
            worst = max(
                ((f32[k].double() - tensors[prefix + k].double()).abs().max()
                 / tensors[prefix + k].double().abs().max().clamp_min(1e-30)).item()
                for k in f32 if k not in ("inputs", "targets"))
            print(f"case '{prefix}': float32 PyTorch worst |err|/max|ref| = {worst:.2e}")

    meta = {"format": "meshtrain-gpt-reference", "preset": "tiny", "n_layer": str(L),
            "n_head": str(H), "n_embd": str(C), "seq_len": str(T), "vocab_size": str(V),
            "padded_vocab": str(VP), "compute_dtype": "float64", "seed": str(SEED),
            "torch_version": torch.__version__}
    os.makedirs(args.out_dir, exist_ok=True)
    ref_path = os.path.join(args.out_dir, "gpt_tiny_reference.safetensors")
    hf_path = os.path.join(args.out_dir, "gpt_tiny_hf.safetensors")
    save_deterministic(tensors, ref_path, meta)
    save_deterministic(hf_layout(params32), hf_path, {"format": "pt"})
    lib_path = os.path.join(args.out_dir, "safetensors_library_sample.safetensors")
    write_library_sample(lib_path)
    for pth in (ref_path, hf_path, lib_path):
        print(f"wrote {os.path.relpath(pth)} ({os.path.getsize(pth)} bytes)")
    print(f"loss: " + ", ".join(f"'{p}' {tensors[p + 'loss'].item():.6f}" for p in cases))


if __name__ == "__main__":
    main()
