#!/usr/bin/env python3
"""Optimizer state offloaded to disk against the same run in memory
(offload.optimizer_state; docs/OFFLOAD.md, PERFORMANCE.md).

Real `meshtrain train` runs, interleaved (in memory, offloaded, in memory,
...): each run's median step time (the first two steps dropped), the median
over rounds; the optimizer phase alone as well; the resident memory of each
(the allocator's optimizer-state peak and the process's peak RSS); and
whether the offloaded run fits a memory.limit_mb the in-memory run is refused
under. Both runs deterministic (one GEMM backend), so their losses must agree
bit for bit, which is checked.

  python3 bench/offload.py --n-embd 768 --n-layer 8 --batch 8 --seq 256
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import cpu_model, print_table  # noqa: E402


def run_train(bin_, args, run_dir, ok=True):
    cmd = [bin_, "train"] + args + ["--set", f"telemetry.dir={run_dir}"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if ok and r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout[-3000:]}")
    return r


def metrics(run_dir):
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if l.strip()]
    steps = [r for r in rows if "step_ms" in r]
    return steps


def summarize(run_dir, log):
    steps = metrics(run_dir)[2:]
    mem = json.load(open(os.path.join(run_dir, "memory.json")))[0]
    rss = float(re.search(r"process peak RSS ([0-9.]+) MB", log).group(1))
    return {"step_ms": statistics.median(r["step_ms"] for r in steps),
            "opt_ms": statistics.median(r["optimizer_ms"] for r in steps),
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps),
            "losses": [r["loss"] for r in metrics(run_dir)],
            "opt_peak_mb": mem["peak"]["optimizer"] / 1e6,
            "predicted_mb": mem["predicted"]["training_total"] / 1e6,
            "offloaded_mb": mem["predicted"].get("offloaded", 0) / 1e6,
            "rss_mb": rss}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin/meshtrain")
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--n-layer", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="train.threads (0: all cores)")
    ap.add_argument("--unit-mb", type=float, default=32)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--path", default="", help="offload.path (default: $TMPDIR or /tmp)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        subprocess.run([a.bin, "data", "synth", "--out", data, "--tokens", "400000"], check=True,
                       stdout=subprocess.DEVNULL)
        base = ["--set", "model.preset=char-2L", "--set", f"model.n_embd={a.n_embd}",
                "--set", f"model.n_layer={a.n_layer}", "--set", f"model.n_head={a.n_embd // 64}",
                "--set", "model.vocab_size=256", "--set", f"model.seq_len={a.seq}",
                "--set", f"data.train={data}/train_*.bin", "--set", "data.val=",
                "--set", f"train.micro_batch={a.batch}", "--set", f"train.steps={a.steps}",
                "--set", "train.warmup=1", "--set", "train.eval_every=0",
                "--set", f"train.threads={a.threads}", "--set", "deterministic=true",
                "--set", "checkpoint.every=0", "--set", "checkpoint.resume=never"]
        off = ["--set", "offload.optimizer_state=disk", "--set", f"offload.path={a.path}",
               "--set", f"offload.unit_mb={a.unit_mb}", "--set", f"offload.prefetch={a.prefetch}"]
        runs = {"in memory": [], "offloaded": []}
        last_log = {}
        for rnd in range(a.rounds):
            for name, extra in (("in memory", []), ("offloaded", off)):
                d = os.path.join(tmp, f"{name.replace(' ', '_')}_{rnd}")
                r = run_train(a.bin, base + extra, d)
                runs[name].append(summarize(d, r.stdout))
                last_log[name] = r.stdout
        mem, offd = runs["in memory"], runs["offloaded"]
        if mem[0]["losses"] != offd[0]["losses"]:
            sys.exit(f"losses differ: {mem[0]['losses']} vs {offd[0]['losses']}")
        # The limit: what the offloaded run is predicted to need, rounded up.
        limit = float(int(offd[0]["predicted_mb"]) + 1)
        refused = run_train(a.bin, base + ["--set", f"memory.limit_mb={limit}"],
                            os.path.join(tmp, "lim_mem"), ok=False).returncode != 0
        fits = run_train(a.bin, base + off + ["--set", f"memory.limit_mb={limit}"],
                         os.path.join(tmp, "lim_off"), ok=False).returncode == 0
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    print(f"# {cpu_model()}; model n_embd {a.n_embd}, n_layer {a.n_layer}, batch {a.batch} x "
          f"{a.seq}; {a.rounds} interleaved rounds of {a.steps} steps; unit {a.unit_mb} MB, "
          f"prefetch {a.prefetch}")
    for line in last_log["offloaded"].splitlines():
        if line.startswith("optimizer state offloaded"):
            print("# " + line)
    rows = []
    for name, rs in runs.items():
        rows.append([name, f"{med(rs, 'step_ms'):.1f}", f"{med(rs, 'opt_ms'):.1f}",
                     f"{med(rs, 'tokens_per_s'):.0f}", f"{rs[0]['opt_peak_mb']:.1f}",
                     f"{rs[0]['offloaded_mb']:.1f}", f"{med(rs, 'rss_mb'):.1f}",
                     f"{rs[0]['predicted_mb']:.1f}"])
    print_table("offload.optimizer_state: disk vs in memory (median step, median over rounds)",
                ["run", "step ms", "optimizer ms", "tokens/s", "opt state resident MB",
                 "on disk MB", "peak RSS MB", "predicted MB"], rows)
    ratio = med(offd, "tokens_per_s") / med(mem, "tokens_per_s")
    state = offd[0]["offloaded_mb"]
    per_round = ", ".join("%.3f" % (o["tokens_per_s"] / m["tokens_per_s"]) for m, o in zip(mem, offd))
    print(f"speed offloaded / in memory: {ratio:.3f} (per round: {per_round})")
    print(f"optimizer state {state:.1f} MB = {state / limit:.2f}x the limit; memory.limit_mb = "
          f"{limit:.0f}: in memory {'refused' if refused else 'ACCEPTED'}, offloaded "
          f"{'trains' if fits else 'FAILED'}; losses equal bit for bit")


if __name__ == "__main__":
    main()
