"""PyTorch gloo allreduce sweep (out-of-place timing of in-place all_reduce),
same sizes as `meshtrain bench comm -f 4`. Usage: gloo_allreduce.py RANKS MAXBYTES"""
import os, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp

def parse(s):
    m = {"K": 1024, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * m[s[-1]]) if s[-1] in m else int(s)

def worker(rank, n, hi):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("gloo", rank=rank, world_size=n)
    size = 8
    while size <= hi:
        t = torch.ones(max(1, size // 4))
        iters = 100 if size <= 1 << 20 else 20
        for _ in range(5): dist.all_reduce(t)
        dist.barrier(); t0 = time.perf_counter()
        for _ in range(iters): dist.all_reduce(t)
        us = (time.perf_counter() - t0) / iters * 1e6
        if rank == 0:
            alg = t.numel() * 4 / us / 1e3
            print(f"{t.numel()*4:12d} {t.numel():12d} float sum -1 {us:9.2f} {alg:8.2f} {alg*2*(n-1)/n:8.2f}")
        size *= 4
    dist.destroy_process_group()

if __name__ == "__main__":
    n, hi = int(sys.argv[1]), parse(sys.argv[2])
    mp.spawn(worker, args=(n, hi), nprocs=n)
