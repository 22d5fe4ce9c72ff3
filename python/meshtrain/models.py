"""Model files in and out: a checkpoint's weights as one model file (a
Hugging Face export for transformers, or meshtrain's own), and a model file
(meshtrain, Hugging Face GPT-2 safetensors, llm.c) as a checkpoint to
train on. Both are the CLI's `meshtrain ckpt export` / `ckpt import`."""
import json
import os
from typing import Optional

from meshtrain._cli import run_cli


def export_model(checkpoint: str, to: str, format: str = "hf", tokenizer: Optional[str] = None) -> str:
    """Writes the newest complete checkpoint under `checkpoint` (or one
    step_* directory) as one .safetensors file; format "hf" (Hugging Face
    names, loadable by transformers) or "meshtrain". Returns `to`."""
    args = ["ckpt", "export", os.fspath(checkpoint), "--to", os.fspath(to), "--format", format]
    if tokenizer:
        args += ["--tokenizer", os.fspath(tokenizer)]
    run_cli(args)
    return os.fspath(to)


def import_model(model: str, out: str, n_head: Optional[int] = None) -> str:
    """Makes a checkpoint root `out` from a model file, to resume or
    fine-tune from. Returns `out`."""
    args = ["ckpt", "import", os.fspath(model), "--out", os.fspath(out)]
    if n_head:
        args += ["--n-head", n_head]
    run_cli(args)
    return os.fspath(out)


def inspect_checkpoints(checkpoint: str, verify: bool = True) -> list:
    """The checkpoints under a root (or one step_* directory) as dicts
    (`meshtrain ckpt inspect --json`): step, layout, optimizer, files."""
    args = ["ckpt", "inspect", os.fspath(checkpoint), "--json"] + ([] if verify else ["--no-verify"])
    return [json.loads(line) for line in run_cli(args).splitlines() if line.strip().startswith("{")]
