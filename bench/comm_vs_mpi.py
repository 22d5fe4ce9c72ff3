#!/usr/bin/env python3
"""Interleaved collective benchmark: `meshtrain bench comm` against the Open
MPI peer (`mpi_allreduce_perf`, same op, sizes, ranks, warm-up and iteration
counts), alternating runs so that machine noise hits both alike. Prints, per
size, the median out-of-place time and busbw of each side, the ratio of the
medians and every round's paired ratio.

  python3 bench/comm_vs_mpi.py -n 2 -b 1M -e 64M -f 2 --iters 30 --rounds 5
  python3 bench/comm_vs_mpi.py -n 2 -b 8 -e 1K -f 2 --iters 20000 --warmup 2000 --rounds 5
"""
import argparse
import os
import statistics
import subprocess

from bench_util import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_rows(text, cmd):
    """Out-of-place (size, time_us, busbw, wrong) per data row of an nccl-tests style table."""
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if not f or f[0].startswith("#") or not f[0].isdigit() or len(f) < 9:
            continue
        size, time_us, busbw, wrong = int(f[0]), float(f[5]), float(f[7]), int(f[8])
        if wrong:
            raise RuntimeError(f"{wrong} wrong elements at {size} B from: {' '.join(cmd)}")
        rows[size] = (time_us, busbw)
    if not rows:
        raise RuntimeError(f"no table rows from: {' '.join(cmd)}\n{text}")
    return rows


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return parse_rows(out, cmd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", "--nproc", type=int, default=2)
    ap.add_argument("-o", "--op", default="allreduce",
                    choices=["allreduce", "reduce_scatter", "allgather", "broadcast"])
    ap.add_argument("-b", default="1M")
    ap.add_argument("-e", default="64M")
    ap.add_argument("-f", default="2")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    if a.rounds < 1 or a.iters < 1 or a.nproc < 2:
        ap.error("--rounds and --iters must be >= 1 and -n >= 2")

    sweep = ["-b", a.b, "-e", a.e, "-f", a.f]
    ours_cmd = [os.path.join(a.build, "bin", "meshtrain"), "bench", "comm", "-n", str(a.nproc),
                "--op", a.op, "--iters", str(a.iters), "-w", str(a.warmup)] + sweep
    mpirun = ["mpirun", "--oversubscribe", "-n", str(a.nproc)]
    if os.geteuid() == 0:
        mpirun.insert(1, "--allow-run-as-root")
    peer_cmd = mpirun + [os.path.join(a.build, "bin", "mpi_allreduce_perf"), "-o", a.op,
                         "-n", str(a.iters), "-w", str(a.warmup)] + sweep
    ours, peer = [], []
    for r in range(a.rounds):
        ours.append(run(ours_cmd))
        peer.append(run(peer_cmd))
        sizes = sorted(ours[-1])
        print(f"round {r + 1}: " + "  ".join(
            f"{s}: {ours[-1][s][1]:.2f}/{peer[-1].get(s, (0, 0))[1]:.2f}" for s in sizes), flush=True)

    print()
    print(f"{a.op}, {a.nproc} ranks, f32 sum, out-of-place, {a.iters} iterations; medians of "
          f"{a.rounds} alternating rounds; CPU: {cpu_model()}")
    print("| size (B) | meshtrain us | Open MPI us | meshtrain busbw | Open MPI busbw | ratio (time) | per-round ratios |")
    print("|---|---|---|---|---|---|---|")
    for s in sorted(ours[0]):
        ot = statistics.median(o[s][0] for o in ours)
        pt = statistics.median(p[s][0] for p in peer)
        ob = statistics.median(o[s][1] for o in ours)
        pb = statistics.median(p[s][1] for p in peer)
        rounds = " / ".join(f"{p[s][0] / o[s][0]:.2f}" for o, p in zip(ours, peer))
        print(f"| {s} | {ot:.2f} | {pt:.2f} | {ob:.2f} | {pb:.2f} | **{pt / ot:.2f}x** | {rounds} |")


if __name__ == "__main__":
    main()
