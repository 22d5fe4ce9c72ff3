#!/usr/bin/env python3
"""A slow rank on purpose: synchronous data parallelism against the parameter
server with bounded staleness and local SGD (issue 43; docs/PERFORMANCE.md,
"A straggler").

N ranks of this machine (`meshtrain train --nproc N`, one thread per rank),
the synthetic grammar as data. Rank 1 is made F times slower
(MESHTRAIN_TEST_SLOW_RANK=1:F: it sleeps (F - 1) x its forward and backward
time in every step). Every run takes the same number of worker steps, so the
same tokens: train.steps x N micro-batches. Reported, medians over --rounds
interleaved rounds: tokens per second summed over the ranks (the run's "done:"
line: every rank's tokens over the training time), the final validation loss
(after the last step, on the same held-out batches), and each against
synchronous data parallelism with the same straggler.

  python3 bench/straggler.py                    # the table in docs/PERFORMANCE.md
  python3 bench/straggler.py --steps 60 --rounds 1 --modes sync ps
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import MESHTRAIN, cpu_model, print_table, synth_grammar_data  # noqa: E402


def mode_settings(args, mode):
    """The config of one mode; the straggler is the environment's."""
    if mode in ("sync", "sync-even"):
        return []
    if mode == "ps":
        return ["--set", "parallel.parameter_server.enabled=true",
                "--set", f"parallel.parameter_server.staleness={args.staleness}"]
    if mode == "ps-lr":
        return ["--set", "parallel.parameter_server.enabled=true",
                "--set", f"parallel.parameter_server.staleness={args.staleness}",
                "--set", "parallel.parameter_server.staleness_lr=true"]
    if mode == "ps0":
        return ["--set", "parallel.parameter_server.enabled=true",
                "--set", "parallel.parameter_server.staleness=0"]
    if mode == "local":
        return ["--set", f"parallel.local_sgd.sync_every={args.local_h}"]
    sys.exit(f"unknown mode {mode}")


def describe(args, mode):
    return {"sync-even": "synchronous, no straggler",
            "sync": "synchronous data parallelism",
            "ps": f"parameter server, staleness {args.staleness}",
            "ps-lr": f"parameter server, staleness {args.staleness}, lr / staleness",
            "ps0": "parameter server, staleness 0",
            "local": f"local SGD, H = {args.local_h}"}[mode]


def train(args, data, out, mode, rnd):
    run_dir = os.path.join(out, f"{mode}_{rnd}")
    cmd = [args.binary, "train", "--nproc", str(args.nproc),
           "--set", f"model.preset={args.preset}", "--set", f"model.seq_len={args.seq}",
           "--set", f"data.train={data}/train_*.bin", "--set", f"data.val={data}/val_*.bin",
           "--set", f"train.micro_batch={args.batch}", "--set", f"train.steps={args.steps}",
           "--set", f"train.warmup={max(1, args.steps // 20)}", "--set", f"train.lr={args.lr}",
           "--set", "train.threads=1", "--set", f"train.seed={args.seed}",
           "--set", f"train.eval_every={args.steps}", "--set", f"train.eval_batches={args.eval_batches}",
           "--set", f"train.log_every={max(1, args.steps // 5)}",
           "--set", f"telemetry.dir={run_dir}"] + mode_settings(args, mode)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if mode != "sync-even":
        env["MESHTRAIN_TEST_SLOW_RANK"] = f"1:{args.slow_factor:g}"
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}")
    done = re.search(r"done: \d+ steps in \S+ \((\d+) tokens/s\), final loss \S+, val loss ([0-9.]+)", r.stdout)
    if not done:
        sys.exit(f"no 'done:' line with a val loss in:\n{r.stdout[-3000:]}")
    per_rank = re.search(r"steps per rank: ([0-9, ]+)\)", r.stdout)
    return {"tps": float(done.group(1)), "val": float(done.group(2)),
            "steps": per_rank.group(1) if per_rank else ", ".join([str(args.steps)] * args.nproc)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="char-4L")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8, help="per-rank micro-batch")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=150, help="train.steps (each rank's share when even)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-batches", type=int, default=16)
    ap.add_argument("--slow-factor", type=float, default=2.0)
    ap.add_argument("--staleness", type=int, default=2)
    ap.add_argument("--local-h", type=int, default=10, help="a divisor of --steps")
    ap.add_argument("--modes", nargs="+", default=["sync-even", "sync", "ps", "ps-lr", "ps0", "local"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--binary", default=MESHTRAIN)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mt_straggler_") as out:
        data = os.path.join(out, "data")
        entropy = synth_grammar_data(args.binary, data)
        runs = {m: [] for m in args.modes}
        for rnd in range(args.rounds):
            for mode in args.modes:
                runs[mode].append(train(args, data, out, mode, rnd))
                r = runs[mode][-1]
                print(f"round {rnd + 1} {mode}: {r['tps']:.0f} tokens/s, val {r['val']:.4f}, "
                      f"steps per rank {r['steps']}", flush=True)
    med = {m: {"tps": statistics.median(x["tps"] for x in rs), "val": statistics.median(x["val"] for x in rs)}
           for m, rs in runs.items()}
    base = med.get("sync")
    rows = []
    for m in args.modes:
        rows.append([describe(args, m), f"{med[m]['tps']:.0f}",
                     f"{med[m]['tps'] / base['tps']:.2f}x" if base else "-",
                     f"{med[m]['val']:.4f}",
                     f"{100 * (med[m]['val'] / base['val'] - 1):+.2f}%" if base else "-",
                     runs[m][-1]["steps"]])
    tokens = args.steps * args.nproc * args.batch * args.seq
    print_table(f"{args.preset}, context {args.seq}, {args.nproc} ranks x batch {args.batch}, "
                f"{args.steps} x {args.nproc} worker steps ({tokens / 1e6:.2f}M tokens), AdamW lr {args.lr}; "
                f"rank 1 slowed {args.slow_factor:g}x except the first row; medians of {args.rounds} interleaved "
                f"rounds; entropy floor {entropy:.4f} nats; CPU: {cpu_model()}",
                ["mode", "tokens/s (all ranks)", "vs synchronous", "final val loss", "vs synchronous",
                 "steps per rank (last round)"], rows)


if __name__ == "__main__":
    main()
