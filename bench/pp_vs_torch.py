#!/usr/bin/env python3
"""Pipeline parallelism, interleaved with its peer: meshtrain at one rank and
at pp = 2 with GPipe, 1F1B, interleaved 1F1B over --chunks chunks per rank
and zero-bubble ZB-H1 (`meshtrain train --set parallel.pp=2`), and
PyTorch's torch.distributed.pipelining with the same schedules (its
zero-bubble one is ScheduleInterleavedZeroBubble over --chunks chunks;
tools/peers/bench_pp_torch.py, gloo), on the same GPT preset, micro-batch,
micro-batch count and threads per rank, alternating so machine noise hits all
alike. Prints medians, each pipeline's efficiency (tokens/s over p times one
rank's, and over what p single-rank runs deliver at once on this machine)
beside the schedule's bound m / (m + (p - 1) / v), meshtrain's
measured bubble (stage 0's wait) beside the formula (p - 1) / (v m), and the
ratio to PyTorch per schedule.

  python3 bench/pp_vs_torch.py --preset char-6L --seq 256 --micro-batch 1 --micro-batches 8 --rounds 3
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from bench_util import MESHTRAIN, ROOT, cpu_model, print_table, run_json


def ours_cmd(a, data, d, nproc, schedule):
    """meshtrain train on the preset, telemetry in d (pp = nproc when nproc > 1)."""
    cmd = [a.binary, "train", "--set", f"model.preset={a.preset}", "--set", f"data.train={data}",
           "--set", f"train.steps={a.warmup + a.steps}", "--set", f"train.micro_batch={a.micro_batch}",
           "--set", f"train.grad_accum={a.micro_batches}", "--set", "train.eval_every=0",
           "--set", f"train.threads={a.threads}", "--set", f"telemetry.dir={d}"]
    if a.seq:
        cmd += ["--set", f"model.seq_len={a.seq}"]
    if nproc > 1:
        cmd += ["--set", f"parallel.pp={nproc}", "--set", f"parallel.schedule={schedule}",
                "--set", f"parallel.chunks={a.chunks if schedule == 'interleaved' else 1}",
                "--nproc", str(nproc)]
    return cmd


def median_tokens(a, d):
    rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
    return statistics.median(r["tokens_per_s"] for r in rows[a.warmup:])


def ours(a, data, work, name, nproc, schedule):
    """One meshtrain run: its median tokens/s after the warm-up, and stage 0's measured bubble."""
    d = os.path.join(work, name)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    p = subprocess.run(ours_cmd(a, data, d, nproc, schedule), env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{(p.stdout + p.stderr)[-2000:]}")
    m = re.search(r"pipeline bubble: stage 0 waited ([0-9.]+)%", p.stdout)
    return median_tokens(a, d), float(m.group(1)) if m else None


def apart(a, data, work, name, p):
    """p single-rank runs at once, as p pipeline ranks run: the sum of their
    tokens/s is what p ranks of this machine deliver together (the ceiling a
    pipeline's p x one rank assumes, less what the ranks take from each other:
    memory bandwidth, caches, a VM's shared cores)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    dirs = [os.path.join(work, f"{name}_{k}") for k in range(p)]
    procs = [subprocess.Popen(ours_cmd(a, data, d, 1, ""), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for d in dirs]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{name} failed:\n{err[-2000:]}")
    return sum(median_tokens(a, d) for d in dirs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="char-6L")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="threads per rank")
    ap.add_argument("--chunks", type=int, default=2, help="model chunks per rank (interleaved)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--binary", default=MESHTRAIN)
    a = ap.parse_args()
    p, m = 2, a.micro_batches
    peer = [sys.executable, os.path.join(ROOT, "tools", "peers", "bench_pp_torch.py"), "--preset", a.preset,
            "--seq", str(a.seq), "--micro-batch", str(a.micro_batch), "--micro-batches", str(m),
            "--threads", str(a.threads), "--steps", str(a.steps), "--warmup", str(a.warmup),
            "--chunks", str(a.chunks), "--json"]
    # meshtrain's zero-bubble schedule is ZB-H1 (one chunk per rank); torch's
    # is ScheduleInterleavedZeroBubble over --chunks chunks per rank.
    schedules = ["gpipe", "1f1b", "interleaved", "zb-h1"]
    peer_schedule = {"zb-h1": "zero-bubble"}
    apart_name = f"meshtrain {p} single ranks at once"
    names = ["meshtrain one rank", apart_name] + [f"{who} {s}" for s in schedules for who in ("meshtrain", "torch")]
    tok = {k: [] for k in names}
    bubble = {k: [] for k in names}
    version = ""
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data")
        subprocess.run([a.binary, "data", "synth", "--out", data, "--tokens", "400000"], check=True,
                       capture_output=True)
        data = os.path.join(data, "train_*.bin")
        for r in range(a.rounds):
            for i, name in enumerate(names):
                schedule = name.split()[-1]
                if name == apart_name:
                    t, b = apart(a, data, work, f"r{r}_{i}", p), None
                elif name.startswith("torch"):
                    j = run_json(peer + ["--schedule", peer_schedule.get(schedule, schedule)], a.threads)
                    t, b, version = j["tokens_per_s"], None, j["torch_version"]
                else:
                    t, b = ours(a, data, work, f"r{r}_{i}", 1 if "one" in name else p, schedule)
                tok[name].append(t)
                if b is not None:
                    bubble[name].append(b)
                print(f"round {r + 1} {name}: {t:.0f} tok/s" + (f", bubble {b:.1f}%" if b is not None else ""),
                      flush=True)
    med = {k: statistics.median(v) for k, v in tok.items()}
    one, together = med["meshtrain one rank"], med[apart_name]
    rows = []
    for k in names:
        v = a.chunks if k.endswith("interleaved") or k == "torch zb-h1" else 1
        # Zero bubble has no closed form: 1F1B's bound and formula bound it.
        bound, formula = m / (m + (p - 1) / v), (p - 1) / (v * m)
        what = {"meshtrain zb-h1": "1F1B's ", "torch zb-h1": "interleaved "}.get(k, "")
        single = k in ("meshtrain one rank", apart_name)
        eff, eff_apart = med[k] / (p * one), med[k] / together
        b = f"{statistics.median(bubble[k]):.1f}% ({what}formula {100 * formula:.1f}%)" if bubble[k] else "-"
        rows.append([k, f"{med[k]:.0f}",
                     "-" if k == "meshtrain one rank" else
                     f"{eff:.2f}" + ("" if single else f" ({eff / bound:.0%} of {what}bound {bound:.2f})"),
                     "-" if single else f"{eff_apart:.2f} ({eff_apart / bound:.0%} of the bound)", b])
    print_table(f"{a.preset}, pp {p}, {m} micro-batches of {a.micro_batch} x {a.seq}, {a.threads} thread(s) per "
                f"rank, medians of {a.rounds} interleaved rounds ({a.steps} timed steps each); {cpu_model()}",
                ["run", "tokens/s", "efficiency vs p x one meshtrain rank",
                 f"efficiency vs {p} single ranks at once", "stage 0 bubble"], rows)
    print(f"{p} single ranks at once run at {together / (p * one):.2f}x of {p} x one rank alone on this machine")
    for s in schedules:
        print(f"meshtrain / torch {s}: {med['meshtrain ' + s] / med['torch ' + s]:.2f}x")
    print(f"PyTorch {version}")


if __name__ == "__main__":
    sys.exit(main())
