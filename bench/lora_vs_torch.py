#!/usr/bin/env python3
"""LoRA fine-tuning benchmark: meshtrain training LoRA adapters on a frozen
Llama preset, meshtrain fully fine-tuning the same preset, and PyTorch with
PEFT-style LoRA on the same model (tools/peers/bench_llama_torch.py
--lora-rank: same rank, alpha, targets and threads), interleaved round by
round so machine noise hits all alike. Prints median tokens/s, the ratios
the fine-tuning issue sets targets for (LoRA / full fine-tuning, LoRA /
PyTorch LoRA) and the model state each run holds (parameters, gradients,
optimizer state: the frozen base included).

  python3 bench/lora_vs_torch.py --preset llama-100m --batch 4 --seq 128 --rank 16 --rounds 3
  python3 bench/lora_vs_torch.py --preset llama-100m --batch 4 --seq 128 --rank 16 --rounds 3 --precision bf16
"""
import argparse
import os
import statistics
import sys

from bench_util import ROOT, add_bench_options, cpu_model, isa_env, print_table, run_json


def main():
    ap = argparse.ArgumentParser()
    add_bench_options(ap, preset="llama-100m", batch=4, seq=128, threads=1, rounds=3, steps=3)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: meshtrain's mixed precision, PyTorch's autocast (both sides)")
    a = ap.parse_args()
    t = a.threads
    shape = ["--preset", a.preset, "--batch", str(a.batch), "--seq", str(a.seq),
             "--steps", str(a.steps), "--warmup", "1", "--threads", str(t), "--precision", a.precision]
    # Full fine-tuning in bf16 is bench train's fp32-vs-bf16 mode (its bf16 side is taken; it
    # reports no model state).
    ours = [a.binary, "bench", "train"] + shape + ["--json"]
    peer = [sys.executable, os.path.join(ROOT, "tools", "peers", "bench_llama_torch.py"), "--json"] + shape
    runs = {
        "meshtrain LoRA": ours + ["--lora-rank", str(a.rank)],
        "meshtrain full": ours,
        "PyTorch LoRA": peer + ["--lora-rank", str(a.rank)],
    }
    tok, state, trained = {k: [] for k in runs}, {}, {}
    torch_version = ""
    for r in range(a.rounds):
        for name, cmd in runs.items():
            j = run_json(cmd, t, isa_env(None, "peer" if name.startswith("PyTorch") else "ours"))
            tok[name].append(j[a.precision]["tokens_per_s"] if a.precision in j and
                             isinstance(j[a.precision], dict) else j["tokens_per_s"])
            if "model_state_mb" in j:
                state[name] = j["model_state_mb"]
            trained[name] = j.get("trained_params", 0)
            torch_version = j.get("torch_version", torch_version)
            print(f"round {r + 1} {name}: {tok[name][-1]:.1f} tok/s", flush=True)
    med = {k: statistics.median(v) for k, v in tok.items()}
    print_table(f"{a.preset}, LoRA rank {a.rank} alpha 16 on every block linear layer, batch {a.batch} x "
                f"{a.seq}, {t} thread(s), {a.precision}, medians of {a.rounds} interleaved rounds "
                f"({a.steps} timed steps each); {cpu_model()}",
                ["run", "trained parameters", "tokens/s", "model state (MB)"],
                [[k, f"{trained[k] / 1e6:.2f}M", f"{v:.1f}", f"{state[k]:.1f}" if k in state else "-"]
                 for k, v in med.items()])
    mem = (f"{state['meshtrain LoRA'] / state['meshtrain full']:.2f}x model state"
           if "meshtrain full" in state else "model state of full fine-tuning not measured in this mode")
    print(f"LoRA / full fine-tuning: {med['meshtrain LoRA'] / med['meshtrain full']:.2f}x tokens/s, "
          f"{mem}; "
          f"meshtrain LoRA / PyTorch LoRA: {med['meshtrain LoRA'] / med['PyTorch LoRA']:.2f}x tokens/s")
    print(f"PyTorch {torch_version}")


if __name__ == "__main__":
    main()
