#!/usr/bin/env python3
"""Interleaved data-parallel benchmark: meshtrain on 1 rank and on N ranks
against PyTorch DistributedDataParallel (gloo) on N ranks, same model,
per-rank batch, context, optimizer and one thread per rank, alternating runs
so that machine noise hits every side alike. Prints medians, the weak-scaling
factor (N ranks vs 1 rank), the ratio to DDP and exposed communication.

  python3 bench/dp_vs_ddp.py --preset char-6L --batch 8 --nproc 2 4 --rounds 3
"""
import argparse
import os
import statistics
import sys

from bench_util import cpu_model, isa_env, run_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="char-6L")
    ap.add_argument("--batch", type=int, default=8, help="per-rank micro-batch")
    ap.add_argument("--nproc", type=int, nargs="+", default=[2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "meshtrain"))
    ap.add_argument("--isa", choices=["scalar", "avx2", "avx512"],
                    help="cap both sides' CPU dispatch at this level (bench_util.ISA_CAPS)")
    a = ap.parse_args()
    if a.rounds < 1 or a.steps < 1 or any(n < 2 for n in a.nproc):
        ap.error("--rounds and --steps must be >= 1 and every --nproc >= 2")

    common = ["--preset", a.preset, "--batch", str(a.batch), "--steps", str(a.steps)]
    one, ours, peer, exposed = [], {n: [] for n in a.nproc}, {n: [] for n in a.nproc}, {n: [] for n in a.nproc}
    for r in range(a.rounds):
        single = run_json([a.binary, "bench", "train", "--threads", "1", "--json"] + common, 1,
                          isa_env(a.isa, "ours"))
        one.append(single["tokens_per_s"])
        line = f"round {r + 1}: 1 rank {single['tokens_per_s']:.0f} tok/s"
        for n in a.nproc:
            o = run_json([a.binary, "bench", "train", "--nproc", str(n), "--threads", "1",
                          "--json"] + common, 1, isa_env(a.isa, "ours"))
            p = run_json([sys.executable, os.path.join(ROOT, "tools", "peers", "bench_ddp_torch.py"),
                          "--nproc", str(n), "--threads", "1", "--json"] + common, 1,
                         isa_env(a.isa, "peer"))
            ours[n].append(o["tokens_per_s"])
            peer[n].append(p["tokens_per_s"])
            exposed[n].append(o["comm_exposed_ms"] / o["ms_per_step"])
            line += (f" | {n} ranks {o['tokens_per_s']:.0f} vs DDP {p['tokens_per_s']:.0f} "
                     f"(exposed comm {o['comm_exposed_ms']:.1f} of {o['ms_per_step']:.0f} ms)")
        print(line, flush=True)

    base = statistics.median(one)
    print()
    print(f"{a.preset}, batch {a.batch} per rank, f32, one thread per rank, medians of "
          f"{a.rounds} interleaved rounds ({a.steps} timed steps each); CPU: {cpu_model()}"
          + (f"; both capped at {a.isa}" if a.isa else ""))
    print("| ranks | meshtrain tok/s | scaling vs 1 rank | PyTorch DDP (gloo) tok/s | meshtrain / DDP | exposed comm |")
    print("|---|---|---|---|---|---|")
    print(f"| 1 | {base:.0f} | 1.00x | — | — | — |")
    for n in a.nproc:
        o, p = statistics.median(ours[n]), statistics.median(peer[n])
        per_round = " / ".join(f"{x / y:.2f}" for x, y in zip(ours[n], peer[n]))
        print(f"| {n} | {o:.0f} | {o / base:.2f}x | {p:.0f} | {o / p:.2f}x (rounds {per_round}) "
              f"| {statistics.median(exposed[n]) * 100:.1f}% |")


if __name__ == "__main__":
    main()
