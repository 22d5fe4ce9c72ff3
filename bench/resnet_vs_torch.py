#!/usr/bin/env python3
"""Interleaved ResNet training-step benchmark: meshtrain vs PyTorch, the same
network (tools/peers/bench_resnet_torch.py: torchvision's ResNet in plain
torch.nn, channels_last, fused AdamW), batch and thread count, on random
images; alternating runs so machine noise hits both alike. Prints medians
(images/s) and ratios; with --compile a torch.compile column too, with
--peer-bf16 PyTorch's autocast bf16 beside (meshtrain's ResNet is f32 only
so far).

  python3 bench/resnet_vs_torch.py --preset resnet-50 --batch 16 --threads 1 --rounds 3
"""
import argparse
import os
import statistics
import sys

from bench_util import ROOT, add_bench_options, cpu_model, isa_env, print_table, run_json


def main():
    ap = argparse.ArgumentParser()
    add_bench_options(ap, preset="resnet-50", batch=16, seq=0, threads=[1], rounds=3, steps=3)
    ap.add_argument("--compile", action="store_true", help="also the peer under torch.compile")
    ap.add_argument("--peer-bf16", action="store_true", help="also the peer under autocast bf16")
    a = ap.parse_args()
    peer_script = os.path.join(ROOT, "tools", "peers", "bench_resnet_torch.py")
    columns = [("torch", [])] + ([("compile", ["--compile"])] if a.compile else []) + \
              ([("torch bf16", ["--precision", "bf16"])] if a.peer_bf16 else [])
    results = {}
    for r in range(a.rounds):
        for t in a.threads:
            ours = run_json([a.binary, "bench", "train", "--preset", a.preset, "--batch", str(a.batch),
                             "--steps", str(a.steps), "--warmup", "1", "--threads", str(t), "--json"],
                            t, isa_env(None, "ours"))
            res = results.setdefault(t, {"ours": [], "mfu": [], "torch_version": ""})
            res["ours"].append(ours["samples_per_s"])
            res["mfu"].append(ours["mfu"])
            line = f"round {r + 1} threads {t}: meshtrain {ours['samples_per_s']:.2f} images/s"
            for name, extra in columns:
                peer = run_json([sys.executable, peer_script, "--preset", a.preset, "--batch",
                                 str(a.batch), "--steps", str(a.steps), "--warmup", "1",
                                 "--threads", str(t), "--json"] + extra, t, isa_env(None, "peer"))
                res.setdefault(name, []).append(peer["samples_per_s"])
                res["torch_version"] = peer["torch_version"]
                line += f", {name} {peer['samples_per_s']:.2f}"
            print(line, flush=True)
    header = ["threads", "meshtrain images/s"]
    for name, _ in columns:
        header += [f"PyTorch ({name}) images/s", "ratio"]
    header.append("meshtrain MFU")
    rows = []
    for t, res in results.items():
        o = statistics.median(res["ours"])
        row = [str(t), f"{o:.2f}"]
        for name, _ in columns:
            p = statistics.median(res[name])
            row += [f"{p:.2f}", f"{o / p:.2f}x"]
        row.append(f"{statistics.median(res['mfu']) * 100:.1f}%")
        rows.append(row)
    print_table(f"{a.preset}, batch {a.batch}, f32, medians of {a.rounds} interleaved rounds "
                f"({a.steps} timed steps each); {cpu_model()}; PyTorch "
                f"{next(iter(results.values()))['torch_version']}", header, rows)


if __name__ == "__main__":
    main()
