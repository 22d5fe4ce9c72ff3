#!/usr/bin/env python3
"""ZeRO benchmarks with real `meshtrain train` runs (docs/ZERO.md, PERFORMANCE.md).

  overhead: step time of ZeRO stages 1, 2, 3 next to stage 0 (plain data
            parallelism) at the same model and ranks; runs interleaved
            (stage 0, 1, 2, 3, stage 0, ...), median step time of each run
            (first steps dropped), median over rounds.
  capacity: the largest gpt2-family model (vocab 50257, head size 64,
            n_layer = n_embd / 64 as gpt2 has) whose training fits a per-rank
            memory cap, stage 0 vs stage 3, from the allocator's per-rank peaks
            (max of setup and training, memory.json) of two real steps at
            increasing sizes; both stages measured at each size in turn.

  python3 bench/zero_bench.py overhead --nproc 2 --preset char-6L
  python3 bench/zero_bench.py overhead --nproc 2 --preset char-6L --precision bf16
  python3 bench/zero_bench.py capacity --nproc 4 --cap-mb 1000
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)  # every waited-for descendant (all ranks)
    return r.ru_utime + r.ru_stime


def run_train(bin_, args, run_dir):
    cmd = [bin_, "train"] + args + ["--set", f"telemetry.dir={run_dir}"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout[-3000:]}")
    return r.stdout


PRECISION = "fp32"  # --precision: bf16/fp16 shard the f32 master with the optimizer state


def common(data, steps, threads):
    return ["--set", f"data.train={data}/train_*.bin", "--set", "data.val=",
            "--set", f"train.steps={steps}", "--set", "train.warmup=1",
            "--set", "train.eval_every=0", "--set", f"train.threads={threads}",
            "--set", "checkpoint.every=0", "--set", "checkpoint.resume=never",
            "--set", f"precision={PRECISION}"]


def overhead(a, bin_, data, tmp):
    stages = [0] + [int(s) for s in a.stages.split(",")]
    times = {s: [] for s in stages}
    cpus = {s: [] for s in stages}
    for rnd in range(a.rounds):
        for s in stages:
            d = os.path.join(tmp, f"ov_{s}_{rnd}")
            c0 = cpu_s()
            run_train(bin_, common(data, a.steps, a.threads) + [
                "--nproc", str(a.nproc), "--set", f"model.preset={a.preset}",
                "--set", f"train.micro_batch={a.batch}", "--set", f"model.seq_len={a.seq}",
                "--set", f"zero.stage={s}"], d)
            rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
            times[s].append(statistics.median(r["step_ms"] for r in rows[2:]))
            # CPU of the whole run (all ranks, setup included) per step: other
            # jobs on a busy machine disturb it much less than wall time.
            cpus[s].append((cpu_s() - c0) * 1e3 / a.steps)
            print(f"  round {rnd + 1} stage {s}: {times[s][-1]:.1f} ms/step, "
                  f"{cpus[s][-1]:.0f} CPU ms/step", flush=True)
    base = statistics.median(times[0])
    cbase = statistics.median(cpus[0])
    print(f"\nZeRO step-time overhead ({PRECISION}): {a.preset}, {a.nproc} ranks, micro-batch {a.batch} x "
          f"{a.seq}, {a.threads} thread(s)/rank, median of {a.rounds} interleaved runs")
    print(f"{'stage':>6} {'ms/step':>10} {'vs stage 0':>11} {'CPU ms/step':>12} {'vs stage 0':>11}")
    for s in stages:
        m, c = statistics.median(times[s]), statistics.median(cpus[s])
        rel = lambda x, b: ('%+.1f%%' % ((x / b - 1) * 100)) if s else 'baseline'
        print(f"{s:>6} {m:>10.1f} {rel(m, base):>11} {c:>12.0f} {rel(c, cbase):>11}")


def capacity(a, bin_, data, tmp):
    cap = a.cap_mb * 1e6
    largest = {0: None, 3: None}
    active = {0, 3}  # stages still fitting: a stage is measured until it first exceeds the cap
    print(f"capacity under {a.cap_mb:g} MB per rank, {a.nproc} ranks, recompute {a.recompute} "
          "(allocator peak, max of setup and training):")
    print(f"{'n_layer':>7} {'n_embd':>6} {'params':>9} {'stage 0 MB':>11} {'stage 3 MB':>11}")
    for c in [int(w) for w in a.widths.split(",")]:
        L, peaks, desc = c // 64, {}, ""
        for s in sorted(active):
            d = os.path.join(tmp, f"cap_{s}_{c}")
            log = run_train(bin_, common(data, 2, a.threads) + [
                "--nproc", str(a.nproc), "--set", "model.preset=gpt2",
                "--set", f"model.n_layer={L}", "--set", f"model.n_embd={c}",
                "--set", f"model.n_head={c // 64}", "--set", f"model.seq_len={a.seq}",
                "--set", "train.micro_batch=1", "--set", f"recompute={a.recompute}",
                "--set", f"zero.stage={s}"], d)
            mem = json.load(open(os.path.join(d, "memory.json")))
            peaks[s] = max(max(r["training_peak_total"], r["setup_peak_total"]) for r in mem)
            desc = next(l for l in log.splitlines() if l.startswith("model:")).split(",")[-1].split()[0]
            if peaks[s] <= cap:
                largest[s] = (L, c, desc)
            else:
                active.discard(s)
        cell = lambda s: f"{peaks[s] / 1e6:.0f}{'' if peaks[s] <= cap else '*'}" if s in peaks else "-"
        print(f"{L:>7} {c:>6} {desc:>9} {cell(0):>11} {cell(3):>11}", flush=True)
        if not active:
            break
    print("(* over the cap)")
    for s in (0, 3):
        v = largest[s]
        print(f"stage {s}: largest that fits: " + (f"n_layer {v[0]}, n_embd {v[1]} ({v[2]})" if v else "none"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["overhead", "capacity"])
    p.add_argument("--bin", default="build/bin/meshtrain")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--preset", default="char-6L")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--stages", default="1,2,3")
    p.add_argument("--cap-mb", type=float, default=1000)
    p.add_argument("--recompute", default="none", help="capacity: the same for both stages")
    p.add_argument("--widths", default="128,192,256,320,384,448,512,576,640,704,768,832,896,960,1024")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    a = p.parse_args()
    global PRECISION
    PRECISION = a.precision
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        subprocess.run([a.bin, "data", "synth", "--out", data, "--tokens", "200000"], check=True,
                       stdout=subprocess.DEVNULL)
        (overhead if a.what == "overhead" else capacity)(a, a.bin, data, tmp)


if __name__ == "__main__":
    main()
