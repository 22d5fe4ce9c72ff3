#!/usr/bin/env python3
"""Activation recompute trade-off: step time and activation memory for each
`recompute` mode, with `none` (the baseline) measured in the same run. Modes
alternate within each round so that machine noise hits all alike; medians.

  python3 bench/recompute_modes.py --preset char-6L --batch 8 --threads 1 --rounds 3
"""
import argparse
import statistics

from bench_util import add_bench_options, run_json


def main():
    ap = argparse.ArgumentParser()
    add_bench_options(ap, preset="char-6L", batch=8, seq=0, threads=1, rounds=3, steps=4)
    ap.add_argument("--modes", nargs="+", default=["none", "selective", "every:3", "every:2", "full"])
    a = ap.parse_args()
    modes = a.modes if a.modes[0] == "none" else ["none"] + [m for m in a.modes if m != "none"]
    seq = ["--seq", str(a.seq)] if a.seq else []
    res = {m: {"ms": [], "cpu": [], "bwd": [], "act": 0.0, "pred": 0.0, "peak": 0.0} for m in modes}
    for r in range(a.rounds):
        for m in modes:
            j = run_json([a.binary, "bench", "train", "--preset", a.preset, "--batch", str(a.batch),
                          "--threads", str(a.threads), "--steps", str(a.steps), "--warmup", "1",
                          "--recompute", m, "--json"] + seq, a.threads)
            res[m]["ms"].append(j["ms_per_step"])
            res[m]["cpu"].append(j["cpu_ms_per_step"])
            res[m]["bwd"].append(j["backward_ms"])
            res[m]["act"] = j["activations_allocator_peak_mb"]
            res[m]["pred"] = j["activations_predicted_mb"]
            res[m]["peak"] = j["memory_allocator_peak_mb"]
            print(f"round {r + 1} {m:10s} {j['ms_per_step']:8.1f} ms/step  "
                  f"{j['cpu_ms_per_step']:8.1f} CPU ms/step  "
                  f"activations {j['activations_allocator_peak_mb']:.1f} MB", flush=True)
    base = statistics.median(res["none"]["ms"])
    base_cpu = statistics.median(res["none"]["cpu"])
    base_act = res["none"]["act"]
    print()
    print(f"{a.preset}, batch {a.batch}, {a.threads} thread(s), f32: medians of {a.rounds} "
          f"interleaved rounds ({a.steps} timed steps each); baseline = none")
    print("(CPU ms: this process's CPU time per step, steadier than wall time on a shared machine)")
    print(f"{'recompute':10s} {'ms/step':>9s} {'vs none':>8s} {'CPU ms':>9s} {'vs none':>8s} {'bwd ms':>8s} "
          f"{'activations MB':>15s} {'vs none':>8s} {'predicted MB':>13s} {'total peak MB':>14s}")
    for m in modes:
        ms = statistics.median(res[m]["ms"])
        cpu = statistics.median(res[m]["cpu"])
        print(f"{m:10s} {ms:9.1f} {(ms / base - 1) * 100:+7.1f}% {cpu:9.1f} {(cpu / base_cpu - 1) * 100:+7.1f}% "
              f"{statistics.median(res[m]['bwd']):8.1f} "
              f"{res[m]['act']:15.1f} {(res[m]['act'] / base_act - 1) * 100:+7.1f}% "
              f"{res[m]['pred']:13.1f} {res[m]['peak']:14.1f}")


if __name__ == "__main__":
    main()
