#!/usr/bin/env python3
"""Regenerate the Hugging Face reference fixtures for the `llama-tiny` preset.

The reference is transformers' own LlamaForCausalLM (eager attention, float64)
with a tiny random config equal to meshtrain's `llama-tiny`
(src/meshtrain/nn/llama_config.cpp): 2 layers, 4 query heads sharing 2 k/v
heads (grouped-query attention), n_embd 16, SwiGLU width 40, context 16,
vocabulary 61, rope_theta 1e4, RMSNorm eps 1e-5, untied lm_head, no biases.

Writes, deterministically (fixed seeds):
  tests/fixtures/llama_tiny_reference.safetensors
      the parameters under Hugging Face names in meshtrain's layout (the
      embedding and lm_head padded to Vp = 64 rows, padding rows zero), and
      for each case a batch with its reference results:
        <case>inputs (B,T) I32, <case>targets (B,T) I32 (-1 = ignored),
        <case>logits (B,T,Vp) (padding columns 0), <case>losses (B,T),
        <case>loss (1,), <case>grad.<param name> for every parameter
      with cases "" (B=3, T=16), "t11." (B=2, T=11) and "masked." (some
      targets -1). The loss is the mean cross-entropy over positions whose
      target is >= 0 (targets given per position, no shift inside the model).
  tests/fixtures/llama_tiny_hf/{model.safetensors,config.json}
      the same weights as a Hugging Face model directory: the weights as
      transformers names and shapes them (V = 61 rows, f32) and the config
      as transformers writes it.

Weights are drawn once, rounded to f32 (what the files store); the reference
runs in float64 on those values and results are stored as f32.
Usage: python3 tools/make_llama_fixture.py [--out-dir tests/fixtures]
Needs: torch, transformers, safetensors.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpt_fixture import save_deterministic  # noqa: E402  (byte-stable writer)

L, NH, KV, C, FFN, T, V, VP = 2, 4, 2, 16, 40, 16, 61, 64
SEED = 20241125


def hf_model():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=FFN, num_hidden_layers=L,
                      num_attention_heads=NH, num_key_value_heads=KV, max_position_embeddings=T,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                      attention_bias=False, mlp_bias=False, hidden_act="silu",
                      attn_implementation="eager")
    return LlamaForCausalLM(cfg)


def make_params(model, gen):
    """Matrices N(0, 0.02), norm gains 1 + N(0, 0.1), rounded to f32."""
    out = {}
    for name, p in model.state_dict().items():
        z = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        out[name] = (1.0 + 0.1 * z if name.endswith("norm.weight") else 0.02 * z).to(torch.float32)
    return out


def padded(name, t):
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        z = torch.zeros((VP,) + tuple(t.shape[1:]), dtype=t.dtype)
        z[:V] = t
        return z
    return t


def reference_case(model, params32, idx, targets):
    model.load_state_dict({n: t.to(torch.float64) for n, t in params32.items()})
    model.zero_grad()
    logits = model(input_ids=idx.long()).logits  # (B, T, V), float64
    losses = F.cross_entropy(logits.reshape(-1, V), targets.long().reshape(-1), ignore_index=-1,
                             reduction="none").view(idx.shape)
    loss = losses.sum() / (targets >= 0).sum()
    loss.backward()
    out = {"inputs": idx.to(torch.int32), "targets": targets.to(torch.int32),
           "logits": F.pad(logits.detach(), (0, VP - V)).float(),
           "losses": losses.detach().float(), "loss": loss.detach().float().reshape(1)}
    for name, p in model.named_parameters():
        out["grad." + name] = padded(name, p.grad.float())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out-dir", default=os.path.join(here, "..", "tests", "fixtures"))
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(SEED)
    model = hf_model().to(torch.float64)
    params32 = make_params(model, gen)
    cases = {}
    for prefix, (B, Tb) in (("", (3, T)), ("t11.", (2, 11)), ("masked.", (2, T))):
        idx = torch.randint(0, V, (B, Tb), generator=gen)
        tgt = torch.randint(0, V, (B, Tb), generator=gen)
        if prefix == "masked.":
            tgt[0, 3] = tgt[0, 15] = tgt[1, 0] = -1
            tgt[1, 7:10] = -1
        cases[prefix] = (idx, tgt)
    tensors = {n: padded(n, t) for n, t in params32.items()}
    for prefix, (idx, tgt) in cases.items():
        for k, v in reference_case(model, params32, idx, tgt).items():
            tensors[prefix + k] = v
    import transformers
    meta = {"format": "meshtrain-llama-reference", "preset": "llama-tiny", "compute_dtype": "float64",
            "seed": str(SEED), "torch_version": torch.__version__,
            "transformers_version": transformers.__version__}
    os.makedirs(args.out_dir, exist_ok=True)
    ref_path = os.path.join(args.out_dir, "llama_tiny_reference.safetensors")
    hf_dir = os.path.join(args.out_dir, "llama_tiny_hf")
    os.makedirs(hf_dir, exist_ok=True)
    hf_path = os.path.join(hf_dir, "model.safetensors")
    save_deterministic(tensors, ref_path, meta)
    save_deterministic({n: t.contiguous() for n, t in params32.items()}, hf_path, {"format": "pt"})
    model.config.torch_dtype = torch.float32
    model.config.to_json_file(os.path.join(hf_dir, "config.json"), use_diff=False)
    for pth in (ref_path, hf_path):
        print(f"wrote {os.path.relpath(pth)} ({os.path.getsize(pth)} bytes)")
    print("loss: " + ", ".join(f"'{p}' {tensors[p + 'loss'].item():.6f}" for p in cases))


if __name__ == "__main__":
    main()
