#!/usr/bin/env python3
"""The Python package's cost against the CLI on the same training run:
`meshtrain train` started directly, and meshtrain.train() with its records
read live through run.steps(), alternating, medians of the wall time and of
the median step time.

  python bench/python_api.py [--preset char-4L] [--steps 60] [--nproc 2] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import meshtrain  # noqa: E402


def step_ms(run_dir):
    rows = [r for r in meshtrain.read_metrics(run_dir) if "step_ms" in r]
    return statistics.median(r["step_ms"] for r in rows[2:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="char-4L")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="meshtrain_pybench_")
    exe = meshtrain.binary()
    subprocess.run([exe, "data", "synth", "--out", f"{tmp}/data", "--tokens", "400000"], check=True,
                   capture_output=True)
    base = {"model.preset": a.preset, "model.vocab_size": 256, "data.train": f"{tmp}/data/train_*.bin",
            "train.steps": a.steps, "train.threads": 1, "checkpoint.every": 0, "checkpoint.resume": "never"}
    wall = {"cli": [], "python": []}
    steps = {"cli": [], "python": []}
    for r in range(a.rounds):
        for side in ("cli", "python"):
            over = dict(base, **{"telemetry.dir": f"{tmp}/{side}{r}"})
            start = time.perf_counter()
            if side == "cli":
                args = [exe, "train", "--nproc", str(a.nproc)]
                for k, v in over.items():
                    args += ["--set", f"{k}={v}"]
                subprocess.run(args, check=True, capture_output=True, env=dict(os.environ, MESHTRAIN_PROGRESS="plain"))
            else:
                run = meshtrain.train(None, over, nproc=a.nproc)
                for _ in run.steps():
                    pass
            wall[side].append(time.perf_counter() - start)
            steps[side].append(step_ms(f"{tmp}/{side}{r}"))
        print(f"round {r + 1}: cli {wall['cli'][-1]:.2f} s, python {wall['python'][-1]:.2f} s", flush=True)
    c, p = statistics.median(wall["cli"]), statistics.median(wall["python"])
    cs, ps = statistics.median(steps["cli"]), statistics.median(steps["python"])
    print(f"\n{a.preset}, {a.steps} steps, {a.nproc} ranks x 1 thread, medians of {a.rounds} alternating rounds")
    print("| | CLI | Python API | Python / CLI |")
    print("|---|---|---|---|")
    print(f"| wall time (validation, launch, training, exit) | {c:.2f} s | {p:.2f} s | {p / c:.3f} |")
    print(f"| median step | {cs:.1f} ms | {ps:.1f} ms | {ps / cs:.3f} |")
    print(json.dumps({"cli_s": c, "python_s": p, "ratio": p / c}))


if __name__ == "__main__":
    main()
