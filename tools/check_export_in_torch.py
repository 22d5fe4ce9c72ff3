#!/usr/bin/env python3
"""Loads a `meshtrain ckpt export --format hf` file into a plain PyTorch GPT-2
and runs a forward pass; prints "ok" on success, exits 1 with the reason
otherwise.

The model below follows Hugging Face's GPT-2 exactly (Conv1D weights stored
(in, out), tied lm_head, GELU-tanh), so a strict load_state_dict proves the
names, shapes and layout match what transformers expects. When transformers
is importable, the file is also loaded into GPT2LMHeadModel and the two
models' logits are compared.

usage: check_export_in_torch.py MODEL.safetensors [--n-head N]
"""
import argparse
import math
import re
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file


class Conv1D(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(n_in, n_out))
        self.bias = torch.nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Block(torch.nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = torch.nn.LayerNorm(c, eps=1e-5)
        self.attn = torch.nn.Module()
        self.attn.c_attn = Conv1D(c, 3 * c)
        self.attn.c_proj = Conv1D(c, c)
        self.ln_2 = torch.nn.LayerNorm(c, eps=1e-5)
        self.mlp = torch.nn.Module()
        self.mlp.c_fc = Conv1D(c, 4 * c)
        self.mlp.c_proj = Conv1D(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(c, dim=2)
        heads = lambda z: z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        y = torch.nn.functional.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attn.c_proj(y.transpose(1, 2).reshape(b, t, c))
        h = torch.nn.functional.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp.c_proj(h)


class GPT2(torch.nn.Module):
    def __init__(self, vocab, n_pos, c, n_layer, n_head):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, c)
        self.wpe = torch.nn.Embedding(n_pos, c)
        self.h = torch.nn.ModuleList(Block(c, n_head) for _ in range(n_layer))
        self.ln_f = torch.nn.LayerNorm(c, eps=1e-5)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--n-head", type=int, default=0)
    args = ap.parse_args()

    state = load_file(args.model)
    with safe_open(args.model, "pt") as f:
        meta = f.metadata() or {}
    state = {k.removeprefix("transformer."): v for k, v in state.items()}
    vocab, c = state["wte.weight"].shape
    n_pos = state["wpe.weight"].shape[0]
    n_layer = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"h\.(\d+)\.", k)))
    n_head = args.n_head or int(meta.get("n_head", 0)) or {768: 12, 1024: 16, 1280: 20, 1600: 25}.get(c, 0)
    if not n_head:
        sys.exit("no head count in the file's metadata; pass --n-head")
    model = GPT2(vocab, n_pos, c, n_layer, n_head)
    missing, unexpected = model.load_state_dict(state, strict=False)
    unexpected = [k for k in unexpected if not k.endswith(".attn.bias") and k != "lm_head.weight"]
    if missing or unexpected:
        sys.exit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    idx = torch.randint(0, vocab, (2, min(8, n_pos)))
    with torch.no_grad():
        logits = model(idx)
    if logits.shape != (2, idx.shape[1], vocab) or not torch.isfinite(logits).all():
        sys.exit(f"bad logits: shape {tuple(logits.shape)}")
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), idx.reshape(-1))
    try:
        import transformers  # optional
    except ImportError:
        transformers = None
    if transformers is not None:
        cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=n_pos, n_embd=c, n_layer=n_layer,
                                      n_head=n_head, activation_function="gelu_new")
        hf = transformers.GPT2LMHeadModel(cfg)
        hf.transformer.load_state_dict(state, strict=False)
        hf.tie_weights()
        hf.eval()
        with torch.no_grad():
            ref = hf(idx).logits
        if not torch.allclose(ref, logits, atol=1e-4, rtol=1e-4):
            sys.exit("transformers' GPT2LMHeadModel disagrees with the plain model")
    print(f"ok: {n_layer} layers, n_embd {c}, {n_head} heads, vocab {vocab}, context {n_pos}; "
          f"loss on random tokens {loss.item():.3f} (ln V = {math.log(vocab):.3f})"
          f"{'; transformers agrees' if transformers else ''}")


if __name__ == "__main__":
    main()
