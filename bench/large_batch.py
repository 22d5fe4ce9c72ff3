#!/usr/bin/env python3
"""The large-batch recipe, measured (issue 43; docs/PERFORMANCE.md, "Large batches").

Trains char-2L (context 64) on the synthetic grammar (`meshtrain data synth`:
its entropy rate is the exact floor of the loss) at global batch B, 4B, 16B
and 64B sequences, gradient accumulation standing in for ranks (the same
mathematics: the mean gradient of k x B sequences), every run with the same
token budget and a cosine schedule over it. Per optimizer recipe and warmup:
  adamw-linear  AdamW, lr = base_lr x k          (Goyal et al.'s rule)
  adamw-sqrt    AdamW, lr = base_lr x sqrt(k)
  lamb-sqrt     LAMB,  lr = lamb_lr x sqrt(k)    (You et al.'s rule for LAMB)
Warmup is given in tokens (the same fraction of the budget at every batch).
Reported: the tokens each run needed to bring the validation loss to the
target (target_ratio x the entropy floor; linear between evaluations; "-"
if never), and its final validation loss as a multiple of the floor.

  python3 bench/large_batch.py                      # the table in docs/PERFORMANCE.md
  python3 bench/large_batch.py --factors 1 16 --recipes lamb-sqrt
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import MESHTRAIN, cpu_model, print_table, synth_grammar_data  # noqa: E402

RECIPES = {
    "adamw-linear": ("adamw", "linear"),
    "adamw-sqrt": ("adamw", "sqrt"),
    "lamb-sqrt": ("lamb", "sqrt"),
}


def run(args, data, entropy, recipe, factor, warmup_tokens, out):
    optimizer, scaling = RECIPES[recipe]
    seq, micro = args.seq, args.base_batch
    tokens_per_step = micro * factor * seq
    steps = max(1, args.tokens // tokens_per_step)
    warmup = max(1, round(warmup_tokens / tokens_per_step))
    evals = args.evals
    run_dir = os.path.join(out, f"{recipe}_k{factor}_w{warmup_tokens}")
    lr = args.lamb_lr if optimizer == "lamb" else args.base_lr
    cmd = [args.binary, "train", "--set", "model.preset=char-2L", "--set", f"model.seq_len={seq}",
           "--set", f"data.train={data}/train_*.bin", "--set", f"data.val={data}/val_*.bin",
           "--set", f"train.micro_batch={micro}", "--set", f"train.grad_accum={factor}",
           "--set", f"train.steps={steps}", "--set", f"train.warmup={warmup}",
           "--set", f"train.optimizer={optimizer}", "--set", f"train.lr={lr}",
           "--set", f"train.lr_scaling={scaling}", "--set", f"train.lr_base_batch={micro}",
           "--set", f"train.weight_decay={args.weight_decay}",
           "--set", f"train.eval_every={max(1, steps // evals)}",
           "--set", f"train.eval_batches={args.eval_batches}", "--set", f"train.threads={args.threads}",
           "--set", f"train.log_every={max(1, steps // evals)}", "--set", f"train.seed={args.seed}",
           "--set", f"telemetry.dir={run_dir}"]
    scaled = lr * (factor if scaling == "linear" else math.sqrt(factor))
    result = {"recipe": recipe, "factor": factor, "warmup_tokens": warmup_tokens, "lr": scaled,
              "steps": steps, "warmup_steps": warmup, "tokens_to_target": None,
              "final_ratio": None, "stopped": None}
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=args.run_timeout)
    except subprocess.TimeoutExpired:
        # A diverged run can crawl (its backward about 15x slower: values
        # near the float range's ends); it is reported, not waited for.
        result["stopped"] = f"over {args.run_timeout} s"
        return result
    if r.returncode != 0:
        if "non-finite" not in r.stdout:
            sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout[-3000:]}")
        result["stopped"] = "diverged"
        return result
    curve = []  # (tokens, val loss)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if "val_loss" in row:
                curve.append((row["step"] * tokens_per_step, row["val_loss"]))
    target = args.target_ratio * entropy
    reached = None
    prev = (0, math.inf)
    for t, v in curve:
        if v <= target:
            # Linear between the evaluation before (above the target) and this one.
            t0, v0 = prev
            reached = t if not math.isfinite(v0) else t0 + (t - t0) * (v0 - target) / (v0 - v)
            break
        prev = (t, v)
    result["tokens_to_target"] = reached
    result["final_ratio"] = curve[-1][1] / entropy if curve else None
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=MESHTRAIN)
    ap.add_argument("--factors", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    ap.add_argument("--warmups", type=int, nargs="+", default=[32768, 262144],
                    help="warmup lengths in tokens")
    ap.add_argument("--base-batch", type=int, default=8, help="B: sequences per step at k = 1")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=1_572_864, help="token budget of every run")
    ap.add_argument("--base-lr", type=float, default=2e-3, help="AdamW's lr at batch B")
    ap.add_argument("--lamb-lr", type=float, default=5e-3, help="LAMB's lr at batch B")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--target-ratio", type=float, default=1.10)
    ap.add_argument("--evals", type=int, default=24, help="evaluations per run")
    ap.add_argument("--eval-batches", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--run-timeout", type=int, default=150, help="seconds before a run is given up")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="", help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()

    out = args.out or tempfile.mkdtemp(prefix="mt_large_batch_")
    data = os.path.join(out, "data")
    entropy = synth_grammar_data(args.binary, data)
    results = []
    for warmup in args.warmups:
        for factor in args.factors:
            for recipe in args.recipes:
                r = run(args, data, entropy, recipe, factor, warmup, out)
                results.append(r)
                print(json.dumps(r), flush=True)
    target_tokens = args.target_ratio * entropy
    header = ["warmup (tokens)", "recipe"] + [f"{k}B ({k * args.base_batch} seq)" for k in args.factors]
    rows = []
    for warmup in args.warmups:
        for recipe in args.recipes:
            cells = []
            for factor in args.factors:
                r = next(x for x in results if x["recipe"] == recipe and x["factor"] == factor
                         and x["warmup_tokens"] == warmup)
                t = r["tokens_to_target"]
                if r["stopped"]:
                    cells.append(f"{r['stopped']} (lr {r['lr']:.3g})")
                else:
                    cells.append((f"{t / 1e3:.0f}K" if t else "-") +
                                 f" ({r['final_ratio']:.3f}x, lr {r['lr']:.3g})")
            rows.append([str(warmup), recipe] + cells)
    print_table(f"Tokens to validation loss {args.target_ratio:.2f}x the entropy floor "
                f"({target_tokens:.4f} nats; floor {entropy:.4f}), budget {args.tokens / 1e6:.2f}M "
                f"tokens a run, (final loss / floor, lr); char-2L T={args.seq}, {cpu_model()}",
                header, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"entropy": entropy, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
