#!/usr/bin/env python3
"""Interleaved training-step benchmark: meshtrain vs PyTorch, same model,
batch, context, optimizer and thread count, alternating runs so that machine
noise hits both alike. Prints medians and the ratio.

  python3 bench/train_vs_torch.py --preset char-6L --batch 8 --threads 1 2 --rounds 3
  python3 bench/train_vs_torch.py --isa avx2 --compile   # both capped at AVX2; + torch.compile

The PyTorch peer uses SDPA and fused AdamW; --compile adds a second peer run
under torch.compile (inductor), interleaved with the others.
"""
import argparse
import os
import statistics
import sys

from bench_util import ROOT, add_bench_options, cpu_model, isa_env, run_json


def main():
    ap = argparse.ArgumentParser()
    add_bench_options(ap, preset="char-6L", batch=8, seq=0, threads=[1, 2], rounds=3, steps=6)
    ap.add_argument("--isa", choices=["scalar", "avx2", "avx512"],
                    help="cap both sides' CPU dispatch at this level (bench_util.ISA_CAPS)")
    ap.add_argument("--compile", action="store_true", help="also run the peer under torch.compile")
    a = ap.parse_args()
    seq = ["--seq", str(a.seq)] if a.seq else []
    results = {}
    for r in range(a.rounds):
        for t in a.threads:
            ours = run_json([a.binary, "bench", "train", "--preset", a.preset, "--batch",
                             str(a.batch), "--threads", str(t), "--steps", str(a.steps),
                             "--warmup", "2", "--json"] + seq, t, isa_env(a.isa, "ours"))
            peer_cmd = [sys.executable, os.path.join(ROOT, "tools", "peers", "bench_train_torch.py"),
                        "--preset", a.preset, "--batch", str(a.batch), "--threads", str(t),
                        "--steps", str(a.steps), "--warmup", "2", "--optim-impl", "fused",
                        "--json"] + seq
            peer = run_json(peer_cmd, t, isa_env(a.isa, "peer"))
            res = results.setdefault(t, {"ours": [], "peer": [], "mfu": [], "peak": [], "torch": "",
                                         "ours_cpu": [], "peer_cpu": [], "compiled": []})
            if a.compile:
                comp = run_json(peer_cmd + ["--compile", "--warmup", "3"], t, isa_env(a.isa, "peer"))
                if not comp.get("compiled"):
                    raise RuntimeError("torch.compile did not compile the peer")
                res["compiled"].append(comp["tokens_per_s"])
            res["ours_cpu"].append(ours["tokens_per_cpu_s"])
            res["peer_cpu"].append(peer["tokens_per_cpu_s"])
            res["ours"].append(ours["tokens_per_s"])
            res["peer"].append(peer["tokens_per_s"])
            res["mfu"].append(ours["mfu"])
            res["peak"].append(ours["sgemm_peak_gflops"])
            res["torch"] = peer.get("torch_version", "")
            print(f"round {r + 1} threads {t}: meshtrain {ours['tokens_per_s']:.0f} tok/s "
                  f"(MFU {ours['mfu'] * 100:.1f}%), torch {peer['tokens_per_s']:.0f} tok/s"
                  + (f", torch.compile {res['compiled'][-1]:.0f} tok/s" if a.compile else ""),
                  flush=True)
    print()
    print(f"{a.preset}, batch {a.batch}, f32, medians of {a.rounds} interleaved rounds "
          f"({a.steps} timed steps each); {cpu_model()}"
          + (f"; both capped at {a.isa}" if a.isa else ""))
    comp_head = " torch.compile tok/s | ratio |" if a.compile else ""
    print("| threads | meshtrain tok/s | PyTorch tok/s | ratio |" + comp_head +
          " tok per CPU-s: meshtrain / PyTorch (ratio) | meshtrain MFU | sgemm peak GFLOP/s |")
    print("|---|---|---|---|" + ("---|---|" if a.compile else "") + "---|---|---|")
    for t, res in results.items():
        o, p = statistics.median(res["ours"]), statistics.median(res["peer"])
        oc, pc = statistics.median(res["ours_cpu"]), statistics.median(res["peer_cpu"])
        comp = ""
        if a.compile:
            c = statistics.median(res["compiled"])
            comp = f" {c:.0f} | {o / c:.2f}x |"
        print(f"| {t} | {o:.0f} | {p:.0f} | {o / p:.2f}x |{comp} {oc:.0f} / {pc:.0f} ({oc / pc:.2f}x) "
              f"| {statistics.median(res['mfu']) * 100:.1f}% "
              f"| {statistics.median(res['peak']):.1f} |")
    # Each round's two runs are neighbours in time, so their ratio cancels the
    # machine's slower drifts better than the ratio of separate medians.
    for t, res in results.items():
        per_round = [o / p for o, p in zip(res["ours"], res["peer"])]
        line = " ".join(f"{x:.2f}" for x in per_round)
        if a.compile:
            line += " | vs torch.compile: " + " ".join(
                f"{o / c:.2f}" for o, c in zip(res["ours"], res["compiled"]))
        print(f"per-round ratios, {t} thread(s): {line} "
              f"(median {statistics.median(per_round):.2f}x)")
    print(f"PyTorch {results[a.threads[0]]['torch']}")


if __name__ == "__main__":
    main()
