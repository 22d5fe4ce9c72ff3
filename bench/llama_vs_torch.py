#!/usr/bin/env python3
"""Interleaved Llama training-step benchmark: meshtrain vs PyTorch, same
Llama-style model (tools/peers/bench_llama_torch.py: SDPA with grouped-query
heads, fused AdamW), batch, context and thread count, in f32 and bf16
(meshtrain: bf16 GEMM operands with f32 masters; PyTorch: autocast bf16 with
f32 masters), alternating runs so machine noise hits both alike. Prints
medians and ratios.

  python3 bench/llama_vs_torch.py --preset llama-100m --batch 4 --seq 128 --threads 1 2 --rounds 3
"""
import argparse
import os
import statistics
import sys

from bench_util import ROOT, add_bench_options, cpu_model, isa_env, run_json


def main():
    ap = argparse.ArgumentParser()
    add_bench_options(ap, preset="llama-100m", batch=4, seq=128, threads=[1, 2], rounds=3, steps=4)
    ap.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--compile", action="store_true",
                    help="the peer's step under torch.compile (inductor) too, a third column")
    a = ap.parse_args()
    shape = ["--preset", a.preset, "--batch", str(a.batch), "--seq", str(a.seq),
             "--steps", str(a.steps), "--warmup", "2"]
    results = {}
    for r in range(a.rounds):
        for t in a.threads:
            for prec in a.precision:
                cmd = [a.binary, "bench", "train"] + shape + ["--threads", str(t), "--json"]
                if prec == "bf16":
                    ours = run_json(cmd + ["--precision", "bf16"], t, isa_env(None, "ours"))
                    ours_tok, mfu = ours["bf16"]["tokens_per_s"], None
                else:
                    ours = run_json(cmd, t, isa_env(None, "ours"))
                    ours_tok, mfu = ours["tokens_per_s"], ours["mfu"]
                peer_cmd = ([sys.executable, os.path.join(ROOT, "tools", "peers", "bench_llama_torch.py")]
                            + shape + ["--threads", str(t), "--precision", prec, "--json"])
                peer = run_json(peer_cmd, t, isa_env(None, "peer"))
                res = results.setdefault((t, prec), {"ours": [], "peer": [], "mfu": [], "torch": "",
                                                     "compiled": []})
                res["ours"].append(ours_tok)
                res["peer"].append(peer["tokens_per_s"])
                if a.compile:
                    compiled = run_json(peer_cmd + ["--compile"], t, isa_env(None, "peer"))
                    res["compiled"].append(compiled["tokens_per_s"])
                    print(f"round {r + 1} threads {t} {prec}: torch.compile "
                          f"{compiled['tokens_per_s']:.0f} tok/s", flush=True)
                if mfu is not None:
                    res["mfu"].append(mfu)
                res["torch"] = peer["torch_version"]
                print(f"round {r + 1} threads {t} {prec}: meshtrain {ours_tok:.0f} tok/s, "
                      f"torch {peer['tokens_per_s']:.0f} tok/s", flush=True)
    print()
    print(f"{a.preset}, batch {a.batch} x {a.seq}, medians of {a.rounds} interleaved rounds "
          f"({a.steps} timed steps each); {cpu_model()}")
    extra_head = " torch.compile tok/s | ratio |" if a.compile else ""
    print("| threads | precision | meshtrain tok/s | PyTorch tok/s | ratio |" + extra_head
          + " meshtrain MFU |")
    print("|---|---|---|---|---|" + ("---|---|" if a.compile else "") + "---|")
    for (t, prec), res in results.items():
        o, p = statistics.median(res["ours"]), statistics.median(res["peer"])
        mfu = f"{statistics.median(res['mfu']) * 100:.1f}%" if res["mfu"] else "-"
        extra = ""
        if a.compile:
            c = statistics.median(res["compiled"])
            extra = f" {c:.0f} | {o / c:.2f}x |"
        print(f"| {t} | {prec} | {o:.0f} | {p:.0f} | {o / p:.2f}x |{extra} {mfu} |")
    print(f"PyTorch {next(iter(results.values()))['torch']}")


if __name__ == "__main__":
    main()
