#!/usr/bin/env python3
"""Interleaved ResNet training-step benchmark: meshtrain vs PyTorch, the same
network (tools/peers/bench_resnet_torch.py: torchvision's ResNet in plain
torch.nn, channels_last, fused AdamW), batch and thread count, on random
images; alternating runs so machine noise hits both alike. Prints medians
(images/s) and ratios; with --compile a torch.compile column too, with
--peer-bf16 PyTorch's autocast bf16 beside. With --precision bf16 meshtrain
trains bf16 mixed precision (`bench train --precision bf16`: its fp32 and
bf16 steps interleaved in one process, so our bf16/fp32 ratio comes from
the same run) and the peer runs under autocast bf16.

  python3 bench/resnet_vs_torch.py --preset resnet-50 --batch 16 --threads 1 --rounds 3
  python3 bench/resnet_vs_torch.py --precision bf16 --preset resnet-50 --batch 16 --threads 1

With --nproc N (one thread per rank): meshtrain on 1 rank, meshtrain on N
ranks (`bench train --nproc N`, batch norm local to a rank) and PyTorch DDP
over gloo on N ranks (the peer's --nproc, DDP's defaults), alternating;
prints the scaling over one rank and the ratio to DDP:

  python3 bench/resnet_vs_torch.py --nproc 2 --preset resnet-18-cifar --batch 32 --rounds 3
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
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: meshtrain's bf16 mixed precision against the peer's autocast bf16")
    ap.add_argument("--nproc", type=int, default=1,
                    help="N > 1: data parallel, meshtrain N ranks vs 1 rank vs PyTorch DDP (gloo)")
    a = ap.parse_args()
    if a.nproc > 1:
        return compare_data_parallel(a)
    if a.precision == "bf16":
        return compare_bf16(a)
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


def compare_bf16(a):
    """meshtrain bf16 (and its fp32, interleaved in the same process) against
    PyTorch autocast bf16, alternating runs."""
    peer_script = os.path.join(ROOT, "tools", "peers", "bench_resnet_torch.py")
    results = {}
    for r in range(a.rounds):
        for t in a.threads:
            ours = run_json([a.binary, "bench", "train", "--preset", a.preset, "--batch", str(a.batch),
                             "--steps", str(a.steps), "--warmup", "1", "--threads", str(t),
                             "--precision", "bf16", "--json"], t, isa_env(None, "ours"))
            peer = run_json([sys.executable, peer_script, "--preset", a.preset, "--batch", str(a.batch),
                             "--steps", str(a.steps), "--warmup", "1", "--threads", str(t),
                             "--precision", "bf16", "--json"], t, isa_env(None, "peer"))
            res = results.setdefault(t, {"f32": [], "bf16": [], "peer": [], "path": ours["conv_path"]})
            res["f32"].append(ours["fp32"]["samples_per_s"])
            res["bf16"].append(ours["bf16"]["samples_per_s"])
            res["peer"].append(peer["samples_per_s"])
            res["torch_version"] = peer["torch_version"]
            print(f"round {r + 1} threads {t}: meshtrain fp32 {res['f32'][-1]:.2f}, bf16 "
                  f"{res['bf16'][-1]:.2f} images/s; torch autocast bf16 {res['peer'][-1]:.2f}", flush=True)
    rows = []
    for t, res in results.items():
        f32, b16, peer = (statistics.median(res[k]) for k in ("f32", "bf16", "peer"))
        rows.append([str(t), f"{f32:.2f}", f"{b16:.2f}", f"{b16 / f32:.2f}x", f"{peer:.2f}",
                     f"{b16 / peer:.2f}x"])
    first = next(iter(results.values()))
    print_table(f"{a.preset}, batch {a.batch}, bf16, medians of {a.rounds} interleaved rounds "
                f"({a.steps} timed steps each); {cpu_model()}; PyTorch {first['torch_version']}; "
                f"meshtrain's bf16 {first['path']}",
                ["threads", "meshtrain fp32 images/s", "meshtrain bf16 images/s", "bf16 / fp32",
                 "PyTorch autocast bf16 images/s", "ratio"], rows)


def compare_data_parallel(a):
    """meshtrain 1 rank, meshtrain N ranks and PyTorch DDP (gloo) N ranks, one
    thread per rank, the same per-rank batch, alternating."""
    peer_script = os.path.join(ROOT, "tools", "peers", "bench_resnet_torch.py")
    common = ["--preset", a.preset, "--batch", str(a.batch), "--steps", str(a.steps), "--warmup", "1",
              "--threads", "1", "--json"]
    one, many, ddp, exposed = [], [], [], []
    for r in range(a.rounds):
        single = run_json([a.binary, "bench", "train"] + common, 1, isa_env(None, "ours"))
        ours = run_json([a.binary, "bench", "train", "--nproc", str(a.nproc)] + common, 1, isa_env(None, "ours"))
        peer = run_json([sys.executable, peer_script, "--nproc", str(a.nproc)] + common, 1, isa_env(None, "peer"))
        one.append(single["samples_per_s"])
        many.append(ours["samples_per_s"])
        ddp.append(peer["samples_per_s"])
        exposed.append(ours["comm_exposed_ms"] / ours["ms_per_step"])
        print(f"round {r + 1}: meshtrain 1 rank {one[-1]:.2f}, {a.nproc} ranks {many[-1]:.2f} images/s "
              f"(exposed comm {ours['comm_exposed_ms']:.0f} of {ours['ms_per_step']:.0f} ms); "
              f"DDP {a.nproc} ranks {ddp[-1]:.2f}", flush=True)
    o1, on, p = statistics.median(one), statistics.median(many), statistics.median(ddp)
    ratios = ", ".join(f"{m / d:.2f}" for m, d in zip(many, ddp))
    print_table(f"{a.preset}, batch {a.batch} per rank, f32, one thread per rank, medians of {a.rounds} "
                f"alternating rounds ({a.steps} timed steps each); {cpu_model()}; PyTorch "
                f"{peer['torch_version']} DDP gloo",
                ["ranks", "meshtrain images/s", "scaling vs 1 rank", "PyTorch DDP images/s",
                 "meshtrain / DDP (per round)", "exposed comm"],
                [["1", f"{o1:.2f}", "1.00x", "-", "-", "-"],
                 [str(a.nproc), f"{on:.2f}", f"**{on / o1:.2f}x**", f"{p:.2f}", f"**{on / p:.2f}x** ({ratios})",
                  f"{statistics.median(exposed) * 100:.1f}%"]])


if __name__ == "__main__":
    main()
