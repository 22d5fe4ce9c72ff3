#!/usr/bin/env python3
"""Checks that a Hugging Face Llama directory written by `meshtrain ckpt export
--format hf` loads in transformers (LlamaForCausalLM) and reproduces the
reference logits stored in a fixture (tools/make_llama_fixture.py), which
meshtrain's own forward matches (tests/unit/llama_test.cpp).

Usage: check_llama_export.py EXPORT_DIR REFERENCE.safetensors
Prints "ok: ..." and exits 0, or explains and exits 1.
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import LlamaForCausalLM


def main():
    export_dir, ref_path = sys.argv[1], sys.argv[2]
    model = LlamaForCausalLM.from_pretrained(export_dir, torch_dtype=torch.float32,
                                             attn_implementation="eager")
    ref = load_file(ref_path)
    worst = 0.0
    for case in ("", "t11.", "masked."):
        idx = ref[case + "inputs"].long()
        with torch.no_grad():
            logits = model(input_ids=idx).logits
        want = ref[case + "logits"][..., : logits.shape[-1]]
        scale = want.abs().max().item()
        err = (logits - want).abs().max().item() / scale
        worst = max(worst, err)
        if err > 1e-4:
            print(f"case '{case}': logits differ by {err:.2e} of their scale")
            return 1
    print(f"ok: transformers reproduces the reference logits (worst {worst:.1e} of scale)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
