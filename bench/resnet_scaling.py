#!/usr/bin/env python3
"""The data-parallel scaling story on Fashion-MNIST: the same recipe
(configs/resnet_fashion_sgd.json: resnet-fashion, SGD with Nesterov momentum,
synchronized batch norm) for the same number of epochs on 1, 2, 4 ... ranks at
a fixed per-rank batch, so the global batch grows with the ranks and the
learning rate follows the linear scaling rule (Goyal et al. 2017: lr x G / 128,
the batch the recipe was tuned at) after one epoch of warmup. Prints, per rank
count: the global batch and scaled LR, wall time, images/s, test top-1 after
each epoch, the time to the accuracy target (training time up to the first
evaluation at or above it) and the step breakdown's data wait and exposed
communication. Ranks beyond the CPUs are oversubscribed (say so in figures).

  python3 bench/resnet_scaling.py --ranks 1 2 4 --epochs 6
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench_util import MESHTRAIN, ROOT, cpu_model, print_table

TRAIN_IMAGES, TEST_IMAGES, BASE_BATCH = 60000, 10000, 128


def ensure_data(binary, data):
    if not os.path.exists(os.path.join(data, "meta.json")):
        subprocess.run([binary, "data", "prepare-images", "--idx-dir", "/usr/share/datasets/fashion-mnist",
                        "--out", data], check=True, stdout=subprocess.DEVNULL)


def train(a, ranks, run_dir):
    G = a.batch * ranks
    per_epoch = TRAIN_IMAGES // G
    sets = {"data.train": f"{a.data}/train-*.tar", "data.val": f"{a.data}/test-*.tar",
            "train.micro_batch": a.batch, "train.steps": per_epoch * a.epochs, "train.max_minutes": 0,
            "train.warmup": per_epoch, "train.lr_scaling": "linear", "train.lr_base_batch": BASE_BATCH,
            "train.eval_every": per_epoch, "train.eval_batches": TEST_IMAGES // G,
            "train.log_every": per_epoch, "checkpoint.every": 0, "telemetry.dir": run_dir,
            "run_name": f"scaling_{ranks}"}
    cmd = [a.binary, "train", "--config", os.path.join(ROOT, "configs", "resnet_fashion_sgd.json"),
           "--nproc", str(ranks)]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{res.stderr[-3000:] or res.stdout[-3000:]}")
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return G, per_epoch, wall, records


def summarize(a, ranks, G, per_epoch, wall, records):
    train_s, to_target, top1 = 0.0, None, []
    for r in records:
        train_s += r["step_ms"] / 1e3
        if "val_top1" in r:
            top1.append(r["val_top1"])
            if to_target is None and r["val_top1"] >= a.target:
                to_target = train_s
    steady = records[1:]
    step = statistics.median(r["step_ms"] for r in steady)
    data = sum(r["data_ms"] for r in steady) / sum(r["step_ms"] for r in steady)
    comm = sum(r["comm_exposed_ms"] for r in steady) / sum(r["step_ms"] for r in steady)
    return {"ranks": ranks, "global_batch": G, "lr": 0.1 * G / BASE_BATCH, "steps": len(records),
            "wall_s": wall, "train_s": train_s, "images_per_s": G / (step / 1e3), "top1": top1,
            "to_target_s": to_target, "data_wait": data, "comm_exposed": comm, "step_ms": step}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=MESHTRAIN)
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "fashion-mnist"))
    ap.add_argument("--work", default="/tmp/meshtrain-resnet-scaling")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    ap.add_argument("--target", type=float, default=0.92, help="test top-1 (fraction)")
    a = ap.parse_args()
    ensure_data(a.binary, a.data)
    rows, results = [], []
    for n in a.ranks:
        out = summarize(a, n, *train(a, n, os.path.join(a.work, f"ranks{n}")))
        results.append(out)
        print(json.dumps(out), flush=True)
    for o in results:
        curve = " ".join(f"{t * 100:.1f}" for t in o["top1"])
        target = f"{o['to_target_s']:.0f} s" if o["to_target_s"] is not None else "not reached"
        rows.append([str(o["ranks"]), str(o["global_batch"]), f"{o['lr']:.3f}", f"{o['wall_s']:.0f} s",
                     f"{o['images_per_s']:.0f}", curve, target,
                     f"{o['data_wait'] * 100:.1f}%", f"{o['comm_exposed'] * 100:.1f}%"])
    print_table(f"resnet-fashion on Fashion-MNIST, {a.epochs} epochs, batch {a.batch} per rank, one thread "
                f"per rank, SGD Nesterov, lr 0.1 x G / {BASE_BATCH} (linear rule), one epoch of warmup, "
                f"cosine; {cpu_model()}, {os.cpu_count()} CPUs",
                ["ranks", "global batch", "lr", "wall time", "images/s", "test top-1 % after each epoch",
                 f"training time to {a.target * 100:.0f}%", "data wait", "exposed comm"], rows)


if __name__ == "__main__":
    main()
