#!/usr/bin/env python3
"""PyTorch DistributedDataParallel peer for `meshtrain bench train --nproc N`:
the single-process peer's GPT (tools/peers/bench_train_torch.py, imported, not
copied) trained data-parallel on CPU over the gloo backend, timed per step.

Run with the per-process thread count pinned everywhere, e.g. 2 processes x 4
threads:
  OMP_NUM_THREADS=4 MKL_NUM_THREADS=4 python3 tools/peers/bench_ddp_torch.py \
      --nproc 2 --preset char-6L --batch 8 --seq 256 --threads 4 --steps 20 --warmup 3

The script spawns the N processes itself (torch.multiprocessing, spawn start
method) on one machine: MASTER_ADDR=127.0.0.1 and a free loopback MASTER_PORT.
Each process: torch.set_num_threads(K), set_num_interop_threads(1), the same
GPT and init (same seed on every rank; DDP broadcasts rank 0's parameters
anyway), DDP(model) with default settings (bucket_cap_mb 25, gradient
all-reduce overlapped with backward), the same AdamW as the single-process peer,
uniformly random tokens from a per-rank generator (seed + rank). --batch is the
per-rank batch. A step = dist.barrier() (untimed, aligns the ranks) then
zero_grad + forward + backward + optimizer step + loss.item(). The step time is
the slowest rank's time for that step; the median over the timed steps is
reported, with aggregate tokens/s = N x B x T / median step.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from bench_train_torch import PRESETS, build_gpt  # noqa: E402
from peer_util import time_steps  # noqa: E402


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep gloo on loopback
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError as e:  # only allowed before any parallel work
        print(f"[rank {rank}] warning: could not set interop threads: {e}", file=sys.stderr)

    dist.init_process_group("gloo", rank=rank, world_size=args.nproc,
                            timeout=datetime.timedelta(seconds=args.timeout))
    try:
        run(rank, args)
    finally:
        dist.destroy_process_group()


def run(rank, args):
    N = args.nproc
    log = print if rank == 0 else (lambda *a, **k: None)
    torch.manual_seed(args.seed)
    L, H, C, T, V = PRESETS[args.preset]
    seq = args.seq or T
    model, opt, impl, n_params, flops_per_token = build_gpt(args.preset, seq, args.optim_impl)
    # CPU: no device_ids; default bucket_cap_mb=25
    ddp_model = DDP(model, bucket_cap_mb=args.bucket_cap_mb) if args.bucket_cap_mb else DDP(model)
    if args.powersgd_rank > 0:  # PyTorch's own PowerSGD communication hook
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                   start_powerSGD_iter=2, use_error_feedback=True, warm_start=True)
        ddp_model.register_comm_hook(state, psgd.batched_powerSGD_hook if args.powersgd_batched else psgd.powerSGD_hook)
        log(f"PowerSGD hook: rank {args.powersgd_rank}, error feedback, warm start, from step 2")
    log(f"torch {torch.__version__}, DDP gloo x{N} processes, threads {torch.get_num_threads()} "
        f"(interop {torch.get_num_interop_threads()}) per process, optimizer AdamW {impl}")
    log(f"model {args.preset}: L={L} H={H} C={C} T={T} V={V} (padded {model.Vp}), "
        f"{n_params / 1e6:.2f}M parameters; per-rank batch {args.batch} x {seq}, "
        f"global batch {N * args.batch} x {seq}")

    gen = torch.Generator().manual_seed(args.seed + rank)  # different data on every rank

    def step():
        data = torch.randint(0, V, (args.batch, seq + 1), generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = ddp_model(data[:, :-1], data[:, 1:])
        loss.backward()  # DDP all-reduces gradient buckets as they become ready
        opt.step()
        return loss.item()

    times, cpu_times, loss = time_steps(step, args.warmup, args.steps, log=log,
                                        before=dist.barrier, note=" (rank 0)")

    if not times:
        return
    # Per step: the slowest rank's wall time; CPU time averaged over the ranks.
    t_max = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t_max, op=dist.ReduceOp.MAX)
    cpu_sum = torch.tensor(cpu_times, dtype=torch.float64)
    dist.all_reduce(cpu_sum, op=dist.ReduceOp.SUM)
    loss_sum = torch.tensor([loss], dtype=torch.float64)
    dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
    if rank != 0:
        return
    step_times = t_max.tolist()
    cpu_per_rank = (cpu_sum / N).tolist()
    med = statistics.median(step_times)
    tok_s = N * args.batch * seq / med
    print(f"median {med * 1e3:.1f} ms/step (slowest rank), {tok_s:.0f} tokens/s aggregate "
          f"({tok_s / N:.0f} per rank), {tok_s * flops_per_token / 1e9:.1f} GFLOP/s "
          f"(model FLOPs, 6N + 6LCT per token)")
    if args.json:
        print(json.dumps({
            "peer": "pytorch-ddp-gloo", "torch_version": torch.__version__, "nproc": N,
            "powersgd_rank": args.powersgd_rank,
            "preset": args.preset, "batch": args.batch, "global_batch": N * args.batch,
            "seq": seq, "threads": torch.get_num_threads(), "backend": "gloo",
            "bucket_cap_mb": args.bucket_cap_mb or 25, "optimizer": f"adamw-{impl}", "steps": len(step_times),
            "warmup": args.warmup, "ms_per_step_median": med * 1e3,
            "ms_per_step_mean": statistics.mean(step_times) * 1e3,
            "ms_per_step_median_rank0": statistics.median(times) * 1e3,
            "tokens_per_s": tok_s, "tokens_per_s_per_rank": tok_s / N,
            "flops_per_token": flops_per_token, "model_gflops": tok_s * flops_per_token / 1e9,
            "final_loss": loss_sum.item() / N, "n_params": n_params,
            # CPU seconds per step of one process (mean over ranks), median over steps.
            "cpu_ms_per_step": statistics.median(cpu_per_rank) * 1e3,
        }), flush=True)


def main():
    ap = argparse.ArgumentParser(description="PyTorch DDP (gloo, CPU) training-step benchmark "
                                             "(meshtrain peer)")
    ap.add_argument("--nproc", type=int, default=2, help="number of processes (ranks)")
    ap.add_argument("--preset", default="char-6L", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=8, help="per-rank batch")
    ap.add_argument("--seq", type=int, default=0, help="context T (default: the preset's)")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--optim-impl", default="foreach", choices=["foreach", "fused", "loop"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--powersgd-rank", type=int, default=0,
                    help="register PyTorch's PowerSGD comm hook at this rank (0: plain allreduce)")
    ap.add_argument("--bucket-cap-mb", type=float, default=0,
                    help="DDP's bucket_cap_mb (0: its default, 25). One bucket larger than the model "
                         "keeps the PowerSGD hook's gloo collectives in one order on every rank")
    ap.add_argument("--powersgd-batched", action="store_true",
                    help="the batched hook (one factorization per bucket) instead of per matrix")
    ap.add_argument("--timeout", type=float, default=1800,
                    help="gloo collective timeout in seconds")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args()
    if args.nproc < 1:
        ap.error("--nproc must be >= 1")
    T = PRESETS[args.preset][3]
    if (args.seq or T) > T:
        ap.error(f"--seq {args.seq} exceeds the preset's context {T}")

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var) != str(args.threads):
            print(f"warning: {var}={os.environ.get(var)} (run with {var}={args.threads})",
                  file=sys.stderr)
    try:
        mp.spawn(worker, args=(args, free_port()), nprocs=args.nproc, join=True)
    except mp.ProcessRaisedException as e:
        print(f"error: a rank failed:\n{e}", file=sys.stderr)
        sys.exit(1)
    except mp.ProcessExitedException as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code if e.exit_code and e.exit_code > 0 else 1)


if __name__ == "__main__":
    main()
