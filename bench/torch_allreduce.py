#!/usr/bin/env python3
"""torch.distributed.all_reduce on the "meshtrain" backend against gloo, both
through PyTorch's API, in the same processes and the same run: 2 ranks (or
--nproc), CPU float32 tensors, sizes from 8 B to 64 MiB, the two backends
alternating size by size and round by round. Prints each side's median time
per call and bus bandwidth (2(n-1)/n x bytes / time, as nccl-tests report it)
and their ratios.

  python bench/torch_allreduce.py [--nproc 2] [--rounds 5]

Needs the torch.distributed backend built (build/python, cmake/Torch.cmake)
and a Python with torch (MESHTRAIN_PYTHON, scripts/python-env.sh).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [8, 64, 1 << 10, 4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def worker(rounds):
    import torch
    import torch.distributed as dist
    import meshtrain.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("meshtrain")
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"meshtrain": None, "gloo": dist.new_group(backend="gloo")}
    times = {(b, s): [] for b in groups for s in SIZES}
    for r in range(rounds):
        for size in SIZES:
            t = torch.ones(max(1, size // 4))
            # About 0.1 s of calls at 1 GB/s plus 50 us a call; 5 to 500.
            calls = max(5, min(500, int(0.1 / (size / 1e9 + 50e-6))))
            # Who goes first alternates by round, and each side starts after a
            # pause: gloo's I/O threads stay busy a while after its calls, and
            # whoever follows them on these 2 cores would pay for it.
            order = list(groups.items()) if r % 2 == 0 else list(groups.items())[::-1]
            for name, group in order:
                dist.all_reduce(t, group=group)  # warm: connections and buffers
                time.sleep(0.05)
                dist.barrier(group=group)
                start = time.perf_counter()
                for _ in range(calls):
                    dist.all_reduce(t, group=group)
                times[(name, size)].append((time.perf_counter() - start) / calls)
    if rank == 0:
        print(f"{'bytes':>10} | {'meshtrain us':>12} {'GB/s':>6} | {'gloo us':>10} {'GB/s':>6} | "
              f"{'latency x':>9} {'busbw x':>8}")
        for size in SIZES:
            ours = statistics.median(times[("meshtrain", size)])
            theirs = statistics.median(times[("gloo", size)])
            factor = 2 * (world - 1) / world * size / 1e9
            print(f"{size:>10} | {ours * 1e6:>12.1f} {factor / ours:>6.2f} | {theirs * 1e6:>10.1f} "
                  f"{factor / theirs:>6.2f} | {theirs / ours:>9.2f} {theirs / ours:>8.2f}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.rounds)
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.join(ROOT, "build", "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    print(f"torch.distributed.all_reduce, {a.nproc} ranks, float32 CPU tensors, medians of {a.rounds} "
          f"interleaved rounds; ratios are gloo's time / meshtrain's")
    return subprocess.call([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            "--nproc-per-node", str(a.nproc), os.path.abspath(__file__), "--worker",
                            "--rounds", str(a.rounds)], env=env)


if __name__ == "__main__":
    sys.exit(main())
