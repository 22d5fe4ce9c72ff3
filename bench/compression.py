#!/usr/bin/env python3
"""Gradient compression, measured (issue 43; docs/PERFORMANCE.md, "Gradient compression").

Three parts, all on N ranks of this machine (`meshtrain train --nproc N`,
one thread per rank), the synthetic grammar as data (`meshtrain data synth`:
its entropy rate is the floor of the loss):

1. Convergence and bytes: the same steps (the same tokens) uncompressed and
   with each codec (PowerSGD rank r, top-k, 1-bit sign after a warmup), and
   local SGD / DiLoCo averaging every H steps instead (bytes: the mean per step);
   reported: the final validation loss, its excess over uncompressed, and the
   bytes a rank sent per step (metrics.jsonl grad_wire_bytes) against f32's.
2. Speed on a slow network: the transport throttled (MESHTRAIN_COMM_THROTTLE_GBPS,
   every collective held to its bytes over the rate) to the rate at which
   the uncompressed gradient reduction takes as long as the unthrottled step
   (so it is about half of the throttled step), then uncompressed and
   PowerSGD alternated; median step times, and the speedup.
3. The peer: PyTorch DDP (gloo) with and without its PowerSGD comm hook
   (tools/peers/bench_ddp_torch.py --powersgd-rank), same model, batch and
   rank, unthrottled, alternated with ours unthrottled: what compression
   costs each side in compute when the network is fast.

  python3 bench/compression.py                       # the tables in docs/PERFORMANCE.md
  python3 bench/compression.py --steps 100 --rounds 1 --codecs powersgd
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import MESHTRAIN, ROOT, cpu_model, print_table, run_json, synth_grammar_data  # noqa: E402


def codec_settings(args, codec):
    if codec == "none":
        return []
    if codec in ("local", "diloco"):  # plain averaging or DiLoCo's outer step, every --local-h steps
        outer = ["0.7", "0.9"] if codec == "diloco" else ["1", "0"]
        return ["--set", f"parallel.local_sgd.sync_every={args.local_h}",
                "--set", f"parallel.local_sgd.outer_lr={outer[0]}",
                "--set", f"parallel.local_sgd.outer_momentum={outer[1]}"]
    s = ["--set", f"comm.compression.type={codec}"]
    if codec == "powersgd":
        s += ["--set", f"comm.compression.rank={args.rank}"]
    if codec == "topk":
        s += ["--set", f"comm.compression.ratio={args.topk_ratio}"]
    if codec == "sign":
        s += ["--set", f"comm.compression.warmup_steps={max(1, args.steps // 10)}"]
    return s


def train(args, data, out, name, codec, steps, evals, throttle=None):
    """Runs one training; returns its metrics.jsonl rows."""
    run_dir = os.path.join(out, name)
    cmd = [args.binary, "train", "--nproc", str(args.nproc),
           "--set", f"model.preset={args.preset}", "--set", f"model.seq_len={args.seq}",
           "--set", f"data.train={data}/train_*.bin", "--set", f"data.val={data}/val_*.bin",
           "--set", f"train.micro_batch={args.batch}", "--set", f"train.steps={steps}",
           "--set", f"train.warmup={max(1, steps // 20)}", "--set", f"train.lr={args.lr}",
           "--set", "train.threads=1", "--set", f"train.seed={args.seed}",
           "--set", f"train.eval_every={max(1, steps // evals) if evals else 0}",
           "--set", f"train.eval_batches={args.eval_batches}",
           "--set", f"train.log_every={max(1, steps // 10)}",
           "--set", f"telemetry.dir={run_dir}"] + codec_settings(args, codec)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if throttle:
        env["MESHTRAIN_COMM_THROTTLE_GBPS"] = f"{throttle:.6g}"
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}")
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def step_ms(rows, skip=3):
    return statistics.median(r["step_ms"] for r in rows[skip:])


def convergence(args, data, out, entropy):
    results = {}
    for codec in ["none"] + args.codecs:
        rows = train(args, data, out, f"conv_{codec}", codec, args.steps, args.evals)
        vals = [r["val_loss"] for r in rows if "val_loss" in r]
        compressed = [r for r in rows if r.get("grad_wire_bytes", -1) >= 0 and
                      r["grad_wire_bytes"] < 0.9 * r["grad_dense_bytes"]] or rows
        wire = (statistics.mean(r["grad_wire_bytes"] for r in rows) if codec in ("local", "diloco")
                else statistics.median(r["grad_wire_bytes"] for r in compressed))
        results[codec] = {"val": vals[-1], "wire": wire, "dense": rows[-1]["grad_dense_bytes"]}
        print(f"{codec}: final val {vals[-1]:.4f}, {results[codec]['wire'] / 1e6:.3f} MB sent per step",
              flush=True)
    base = results["none"]["val"]
    table = []
    for codec, r in results.items():
        names = {"powersgd": f"powersgd rank {args.rank}", "local": f"local SGD, H = {args.local_h}",
                 "diloco": f"DiLoCo (outer lr 0.7, Nesterov 0.9), H = {args.local_h}"}
        table.append([names.get(codec, codec),
                      f"{r['val']:.4f}", f"{100 * (r['val'] / base - 1):+.2f}%",
                      f"{r['val'] / entropy:.3f}x", f"{r['wire'] / 1e6:.3f}", f"{r['dense'] / r['wire']:.1f}x"])
    print_table(f"{args.preset}, context {args.seq}, {args.nproc} ranks x batch {args.batch}, {args.steps} steps "
                f"({args.steps * args.nproc * args.batch * args.seq / 1e6:.2f}M tokens), AdamW lr {args.lr}; "
                f"entropy floor {entropy:.4f} nats; CPU: {cpu_model()}",
                ["codec", "final val loss", "vs uncompressed", "vs floor", "MB sent per rank per step",
                 "fewer bytes"], table)
    return results


def speed(args, data, out):
    # The rate at which the uncompressed reduction takes one unthrottled step.
    plain = train(args, data, out, "rate_probe", "none", args.speed_steps, 0)
    t = step_ms(plain) / 1e3
    dense = plain[-1]["grad_dense_bytes"]
    rate = args.throttle_gbps or dense / t / 1e9
    print(f"unthrottled step {t * 1e3:.1f} ms; f32 gradients {dense / 1e6:.2f} MB per rank per step; "
          f"throttle {rate:.4f} GB/s", flush=True)
    times = {"none": [], "powersgd": []}
    exposed = {"none": [], "powersgd": []}
    for r in range(args.rounds):
        for codec in times:
            rows = train(args, data, out, f"speed_{codec}_{r}", codec, args.speed_steps, 0, throttle=rate)
            times[codec].append(step_ms(rows))
            exposed[codec].append(statistics.median(x["comm_exposed_ms"] for x in rows[3:]))
        print(f"round {r + 1}: uncompressed {times['none'][-1]:.1f} ms, PowerSGD {times['powersgd'][-1]:.1f} ms",
              flush=True)
    a, b = statistics.median(times["none"]), statistics.median(times["powersgd"])
    print_table(f"Throttled to {rate:.4f} GB/s (uncompressed gradient communication = one unthrottled step, "
                f"{t * 1e3:.1f} ms), medians of {args.rounds} alternated rounds of {args.speed_steps} steps",
                ["codec", "ms per step", "exposed comm ms", "speedup"],
                [["f32", f"{a:.1f}", f"{statistics.median(exposed['none']):.1f}", "1.00x"],
                 [f"powersgd rank {args.rank}", f"{b:.1f}", f"{statistics.median(exposed['powersgd']):.1f}",
                  f"{a / b:.2f}x"]])


def peer(args, data, out):
    if args.no_peer:
        return
    ours = {"none": [], "powersgd": []}
    theirs = {0: [], args.rank: []}
    failures = []
    common = ["--preset", args.preset, "--batch", str(args.batch), "--seq", str(args.seq),
              "--steps", str(args.speed_steps), "--warmup", "3", "--nproc", str(args.nproc), "--threads", "1",
              "--json"]
    for r in range(args.rounds):
        for codec in ours:
            ours[codec].append(step_ms(train(args, data, out, f"peer_{codec}_{r}", codec, args.speed_steps, 0)))
        for rank in theirs:
            for attempt in range(3):  # the hook's gloo collectives can mismatch across ranks (below)
                try:
                    # One bucket for the hook: with several, its chained gloo allreduces
                    # were issued in different orders on the two ranks (a size mismatch
                    # abort in every 15-step run here).
                    one_bucket = ["--bucket-cap-mb", "1000"] if rank else []
                    p = run_json([sys.executable, os.path.join(ROOT, "tools", "peers", "bench_ddp_torch.py"),
                                  "--powersgd-rank", str(rank)] + one_bucket + common, 1)
                    break
                except RuntimeError as e:
                    lines = str(e).splitlines()
                    failures.append(next((l for l in lines if "what()" in l), lines[-1]).strip()[:200])
                    print(f"peer run failed (attempt {attempt + 1}): {failures[-1]}", flush=True)
            else:
                sys.exit("the peer failed 3 times in a row")
            theirs[rank].append(p["ms_per_step_median"])
        print(f"round {r + 1}: ours {ours['none'][-1]:.1f} / {ours['powersgd'][-1]:.1f} ms, "
              f"DDP {theirs[0][-1]:.1f} / {theirs[args.rank][-1]:.1f} ms", flush=True)
    o0, o1 = statistics.median(ours["none"]), statistics.median(ours["powersgd"])
    p0, p1 = statistics.median(theirs[0]), statistics.median(theirs[args.rank])
    print_table(f"Unthrottled (shared memory vs gloo over loopback), medians of {args.rounds} alternated rounds",
                ["", "f32 ms/step", f"PowerSGD rank {args.rank} ms/step", "PowerSGD / f32"],
                [["meshtrain", f"{o0:.1f}", f"{o1:.1f}", f"{o1 / o0:.2f}"],
                 ["PyTorch DDP (gloo) + powerSGD_hook (one bucket)", f"{p0:.1f}", f"{p1:.1f}", f"{p1 / p0:.2f}"],
                 ["meshtrain / PyTorch", f"{o0 / p0:.2f}", f"{o1 / p1:.2f}", ""]])
    if failures:
        print(f"PyTorch runs that failed and were repeated: {len(failures)} ({failures[0]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="char-6L")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8, help="per-rank micro-batch")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300, help="convergence runs")
    ap.add_argument("--evals", type=int, default=5)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--rank", type=int, default=4, help="PowerSGD rank")
    ap.add_argument("--topk-ratio", type=float, default=0.01)
    ap.add_argument("--codecs", nargs="+", default=["powersgd", "topk", "sign", "local", "diloco"],
                    help="also local and diloco: parameter averaging every --local-h steps")
    ap.add_argument("--local-h", type=int, default=10)
    ap.add_argument("--speed-steps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--throttle-gbps", type=float, default=0, help="0: chosen from the unthrottled step")
    ap.add_argument("--parts", nargs="+", default=["convergence", "speed", "peer"])
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--binary", default=MESHTRAIN)
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="mt_compression_")
    data = os.path.join(out, "data")
    entropy = synth_grammar_data(args.binary, data)
    if "convergence" in args.parts:
        convergence(args, data, out, entropy)
    if "speed" in args.parts:
        speed(args, data, out)
    if "peer" in args.parts:
        peer(args, data, out)
    print(f"\nruns in {out}")


if __name__ == "__main__":
    main()
