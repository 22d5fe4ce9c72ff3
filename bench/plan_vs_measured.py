#!/usr/bin/env python3
"""The planner's step-time prediction against measured local runs.

Calibrates this machine (`meshtrain plan --calibrate --ranks 2`, into a
temporary file), then runs local configurations -- one rank and two, data
and tensor parallel, ZeRO 2 and 3, recompute, bf16, GPT and Llama -- and
prints each one's predicted and measured (median) step time and the error;
then asks the planner to rank layouts for one job on this machine and runs
its top candidates to see whether the measured order agrees.

  python3 bench/plan_vs_measured.py [--bin build/bin/meshtrain] [--steps 6]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_util import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (label, bench train arguments): the step bench train times on random tokens.
BENCH_RUNS = [
    ("char-6L b8, 1 rank", ["--preset", "char-6L", "--batch", "8", "--threads", "1"]),
    ("char-6L b8, recompute full", ["--preset", "char-6L", "--batch", "8", "--threads", "1",
                                     "--recompute", "full"]),
    ("char-6L b4, 1 rank x 2 threads", ["--preset", "char-6L", "--batch", "4", "--threads", "2"]),
    ("char-6L b8, dp 2", ["--preset", "char-6L", "--batch", "8", "--nproc", "2", "--threads", "1"]),
    ("char-6L b8, tp 2", ["--preset", "char-6L", "--batch", "8", "--nproc", "2", "--tp", "2",
                          "--threads", "1"]),
    ("llama-char b8, 1 rank", ["--preset", "llama-char", "--batch", "8", "--threads", "1"]),
]
# (label, train --set overrides): whole training runs (data, ZeRO, mixed precision).
TRAIN_RUNS = [
    ("char-6L b8, dp 2 zero 3", ["zero.stage=3"]),
    ("char-6L b8, dp 2 bf16", ["precision=bf16"]),
    ("char-6L b8, dp 2 bf16 zero 2 recompute full", ["precision=bf16", "zero.stage=2", "recompute=full"]),
    ("char-6L b8, dp 2 bf16 gradient wire", ["comm.grad_dtype=bf16"]),
]
# Candidates of the ranking check differ by at least this much in predicted
# step time, so that the machine's own noise (+-5-10% here) cannot reorder them.
RANK_SEPARATION = 1.15


def bench_train(binary, args, steps, machine):
    env = dict(os.environ, MESHTRAIN_MACHINE_FILE=machine)
    out = subprocess.run([binary, "bench", "train", *args, "--steps", str(steps), "--json"], env=env,
                         check=True, capture_output=True, text=True).stdout
    j = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    return j["predicted_ms"] / 1e3, j["ms_per_step"] / 1e3


def train(binary, sets, steps, machine, data, workdir, nproc=2, micro_batch=8, grad_accum=1):
    env = dict(os.environ, MESHTRAIN_MACHINE_FILE=machine)
    run = tempfile.mkdtemp(dir=workdir)
    cmd = [binary, "train", "--nproc", str(nproc), "--set", "model.preset=char-6L",
           "--set", "model.vocab_size=256", "--set", f"data.train={data}/train_*.bin",
           "--set", f"train.steps={steps}", "--set", f"train.micro_batch={micro_batch}",
           "--set", f"train.grad_accum={grad_accum}", "--set", f"telemetry.dir={run}",
           "--set", "train.threads=1"]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    j = json.load(open(os.path.join(run, "step_time.json")))
    return j["predicted_s"], j["measured_median_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "meshtrain"))
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="plan_vs_measured_")
    machine = os.path.join(work, "machine.json")
    cal = subprocess.run([a.bin, "plan", "--calibrate", "--ranks", "2", "--out", machine], check=True,
                         capture_output=True, text=True).stdout
    print(f"# {cpu_model()}, {os.cpu_count()} CPUs\n# calibration:\n" +
          "".join("#   " + l + "\n" for l in cal.splitlines()[1:-1]))
    data = os.path.join(work, "data")
    subprocess.run([a.bin, "data", "synth", "--out", data, "--tokens", "200000"], check=True,
                   capture_output=True)
    rows = []
    for label, args in BENCH_RUNS:
        rows.append((label, "bench train", *bench_train(a.bin, args, a.steps, machine)))
        print(f"{label:48s} predicted {rows[-1][2]:7.3f} s  measured {rows[-1][3]:7.3f} s  "
              f"({(rows[-1][2] / rows[-1][3] - 1) * 100:+5.1f}%)", flush=True)
    for label, sets in TRAIN_RUNS:
        rows.append((label, "train", *train(a.bin, sets, a.steps, machine, data, work)))
        print(f"{label:48s} predicted {rows[-1][2]:7.3f} s  measured {rows[-1][3]:7.3f} s  "
              f"({(rows[-1][2] / rows[-1][3] - 1) * 100:+5.1f}%)", flush=True)
    errors = [abs(p / m - 1) for _, _, p, m in rows]
    print(f"\n{len(rows)} runs: median |error| {statistics.median(errors) * 100:.1f}%, "
          f"max {max(errors) * 100:.1f}%")

    # The planner's ranking for one job here (char-6L, 16 sequences per step on
    # 2 ranks, layouts the engine runs), its top three run as ranked.
    plan = json.loads(subprocess.run(
        [a.bin, "plan", "--model", "char-6L", "--cluster", machine, "--gpus", "2", "--global-batch", "16",
         "--seq", "256", "--sp", "off", "--precision", "fp32", "--zero", "0", "--top", "200", "--json"], check=True, capture_output=True,
        text=True).stdout)
    picked, seen = [], set()
    for r in plan["layouts"]:
        key = (r["dp"], r["tp"], r["recompute"])
        if r["pp"] != 1 or key in seen:
            continue
        if picked and r["time_s"]["step"] < RANK_SEPARATION * picked[-1]["time_s"]["step"]:
            continue
        seen.add(key)
        picked.append(r)
        if len(picked) == 3:
            break
    print(f"\nplanner's ranking for char-6L, 16 x 256 tokens per step on 2 ranks (its top layout, then "
          f"the next ones of distinct dp, tp, recompute each predicted >= {RANK_SEPARATION:.2f}x slower; "
          f"fp32, zero 0):")
    measured = []
    for i, r in enumerate(picked):
        sets = [f"parallel.tp={r['tp']}", f"recompute={r['recompute']}"]
        p, m = train(a.bin, sets, a.steps, machine, data, work, nproc=r["dp"] * r["tp"],
                     micro_batch=r["micro_batch"], grad_accum=r["micro_batches"])
        measured.append(m)
        print(f"  #{i + 1} dp {r['dp']} tp {r['tp']} micro-batch {r['micro_batch']} x {r['micro_batches']} "
              f"recompute {r['recompute']}: planner {r['time_s']['step']:.3f} s, run's own prediction "
              f"{p:.3f} s, measured {m:.3f} s", flush=True)
    ok = all(measured[0] <= m * 1.02 for m in measured[1:])
    in_order = all(a <= b * 1.02 for a, b in zip(measured, measured[1:]))
    print(f"  the planner's pick is {'' if ok else 'NOT '}the fastest measured (2% noise allowance); "
          f"the measured order {'matches' if in_order else 'does NOT match'} the predicted one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
