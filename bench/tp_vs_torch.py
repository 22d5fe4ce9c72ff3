#!/usr/bin/env python3
"""Interleaved tensor-parallel benchmark on a wide preset (llama-wide or
gpt-wide): meshtrain at
one rank, at tp = N (one tp group, with and without sequence parallelism),
at dp = N, and PyTorch's own tensor
parallelism (tools/peers/bench_tp_torch.py: ColwiseParallel /
RowwiseParallel plans over gloo) on the same model, batch, context and
threads per rank, alternating so machine noise hits all alike. Prints
medians, the tp speed-up over one rank and over dp, the ratio to PyTorch,
and the model state (parameters, gradients, optimizer) one rank holds.

  python3 bench/tp_vs_torch.py --preset llama-wide --nproc 2 --batch 4 --seq 128 --rounds 3
  python3 bench/tp_vs_torch.py --preset gpt-wide --nproc 2 --batch 4 --seq 128 --rounds 3
"""
import argparse
import os
import statistics
import sys

from bench_util import ROOT, add_bench_options, cpu_model, isa_env, print_table, run_json


def main():
    ap = argparse.ArgumentParser()
    add_bench_options(ap, preset="llama-wide", batch=4, seq=128, threads=1, rounds=3, steps=4,
                      threads_help="threads per rank")
    ap.add_argument("--nproc", type=int, default=2)
    a = ap.parse_args()
    n, t = a.nproc, a.threads
    shape = ["--preset", a.preset, "--batch", str(a.batch), "--seq", str(a.seq),
             "--steps", str(a.steps), "--warmup", "2", "--threads", str(t)]
    ours = [a.binary, "bench", "train"] + shape + ["--json"]
    runs = {
        "one rank": ours,
        f"tp {n}": ours + ["--nproc", str(n), "--tp", str(n)],
        f"tp {n} + sp": ours + ["--nproc", str(n), "--tp", str(n), "--sequence-parallel"],
        f"dp {n}": ours + ["--nproc", str(n)],
        f"PyTorch tp {n}": [sys.executable, os.path.join(ROOT, "tools", "peers", "bench_tp_torch.py"),
                            "--nproc", str(n), "--tp", str(n), "--json"] + shape,
    }
    tok, state = {k: [] for k in runs}, {}
    torch_version = ""
    for r in range(a.rounds):
        for name, cmd in runs.items():
            j = run_json(cmd, t, isa_env(None, "peer" if name.startswith("PyTorch") else "ours"))
            tok[name].append(j["tokens_per_s"])
            if "model_state_mb" in j:
                state[name] = j["model_state_mb"]
            torch_version = j.get("torch_version", torch_version)
            print(f"round {r + 1} {name}: {j['tokens_per_s']:.0f} tok/s", flush=True)
    med = {k: statistics.median(v) for k, v in tok.items()}
    print_table(f"{a.preset}, batch {a.batch} x {a.seq} per data-parallel rank, {t} thread(s) per rank, "
                f"medians of {a.rounds} interleaved rounds ({a.steps} timed steps each); {cpu_model()}",
                ["run", "tokens/s", "vs one rank", "model state per rank (MB)"],
                [[k, f"{v:.0f}", f"{v / med['one rank']:.2f}x", f"{state[k]:.1f}" if k in state else "-"]
                 for k, v in med.items()])
    print(f"tp {n} / dp {n}: {med[f'tp {n}'] / med[f'dp {n}']:.2f}x; "
          f"tp {n} / PyTorch tp {n}: {med[f'tp {n}'] / med[f'PyTorch tp {n}']:.2f}x; "
          f"model state tp {n} / one rank: {state[f'tp {n}'] / state['one rank']:.2f}x")
    print(f"PyTorch {torch_version}")


if __name__ == "__main__":
    main()
