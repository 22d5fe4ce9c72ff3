#!/usr/bin/env python3
"""Training step with each f32 GEMM backend policy, interleaved: MESHTRAIN_SGEMM=openblas
(the baseline) next to auto (per-shape timed choice between OpenBLAS and oneDNN) and,
with --policies, onednn. Same binary, model, batch and threads; the order of the
policies rotates every round so machine noise hits all alike. Prints medians of
tokens/s and of tokens per CPU-second (less sensitive to other jobs on a shared
machine), the ratio to openblas, and how many shapes auto gave to oneDNN.

  python3 bench/sgemm_backends.py --preset char-6L --batch 8 --threads 1 2 --rounds 5 --steps 5
"""
import argparse
import statistics

from bench_util import add_bench_options, run_json


def run(binary, policy, a, threads):
    cmd = [binary, "bench", "train", "--preset", a.preset, "--batch", str(a.batch), "--threads",
           str(threads), "--steps", str(a.steps), "--warmup", "2", "--json"]
    if a.seq:
        cmd += ["--seq", str(a.seq)]
    return run_json(cmd, threads, {"MESHTRAIN_SGEMM": policy})


def main():
    ap = argparse.ArgumentParser()
    add_bench_options(ap, preset="char-6L", batch=8, seq=0, threads=[1, 2], rounds=5, steps=5)
    ap.add_argument("--policies", nargs="+", default=["openblas", "auto"])
    a = ap.parse_args()
    res = {}
    for r in range(a.rounds):
        for t in a.threads:
            k = r % len(a.policies)
            for pol in a.policies[k:] + a.policies[:k]:
                j = run(a.binary, pol, a, t)
                d = res.setdefault((t, pol), {"tok": [], "cpu": [], "mfu": [], "picks": [], "rss": []})
                d["tok"].append(j["tokens_per_s"])
                d["cpu"].append(j["tokens_per_cpu_s"])
                d["mfu"].append(j["mfu"])
                d["rss"].append(j["memory_rss_peak_mb"])
                d["picks"].append(f"{j.get('sgemm_onednn_shapes', 0)}/{j.get('sgemm_timed_shapes', 0)}")
                print(f"round {r + 1} threads {t} {pol:>8}: {j['tokens_per_s']:7.0f} tok/s, "
                      f"{j['tokens_per_cpu_s']:7.0f} tok/CPU-s, MFU {j['mfu'] * 100:5.1f}%"
                      f"{', onednn for ' + d['picks'][-1] + ' shapes' if pol == 'auto' else ''}",
                      flush=True)
    print()
    print(f"{a.preset}, batch {a.batch}, f32, medians of {a.rounds} interleaved rounds "
          f"({a.steps} timed steps each); ratios vs MESHTRAIN_SGEMM=openblas")
    print("| threads | MESHTRAIN_SGEMM | tok/s | vs openblas | tok per CPU-s | vs openblas | MFU | "
          "onednn shapes (per round) | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for t in a.threads:
        base = res[(t, a.policies[0])]
        bt, bc = statistics.median(base["tok"]), statistics.median(base["cpu"])
        for pol in a.policies:
            d = res[(t, pol)]
            mt, mc = statistics.median(d["tok"]), statistics.median(d["cpu"])
            picks = " ".join(d["picks"]) if pol != "openblas" else "-"
            print(f"| {t} | {pol} | {mt:.0f} | {mt / bt:.3f}x | {mc:.0f} | {mc / bc:.3f}x | "
                  f"{statistics.median(d['mfu']) * 100:.1f}% | {picks} | "
                  f"{statistics.median(d['rss']):.0f} |")


if __name__ == "__main__":
    main()
