#!/usr/bin/env python3
"""Checks that a LoRA fine-tune exported by `meshtrain ckpt export --format hf`
loads in transformers (LlamaForCausalLM) unchanged and that every tensor it
holds is the merged weight meshtrain computed (the run's model file, or
`ckpt export --format meshtrain` of the same checkpoint), bit for bit; padded
vocabulary rows in meshtrain's file are ignored.

Usage: check_lora_export.py EXPORT_DIR MERGED.safetensors
Prints "ok: ..." and exits 0, or explains and exits 1.
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import LlamaForCausalLM


def main():
    export_dir, merged_path = sys.argv[1], sys.argv[2]
    model = LlamaForCausalLM.from_pretrained(export_dir, torch_dtype=torch.float32)
    merged = load_file(merged_path)
    checked = 0
    for name, tensor in model.state_dict().items():
        if name not in merged:
            print(f"{name}: transformers has it, meshtrain's merged file does not")
            return 1
        want = merged[name][tuple(slice(0, n) for n in tensor.shape)]
        if want.shape != tensor.shape or not torch.equal(want, tensor):
            print(f"{name}: differs from the merged weight")
            return 1
        checked += 1
    ids = torch.arange(8).unsqueeze(0) % model.config.vocab_size
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    if not torch.isfinite(logits).all():
        print("transformers computes non-finite logits from the export")
        return 1
    print(f"ok: transformers loads the export; its {checked} tensors are the merged weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
