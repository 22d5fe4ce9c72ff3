"""A rank that never arrives: the other's collective fails after the group's
timeout (init_process_group(timeout=...)) with torch's DistBackendError
naming the operation and the late rank, instead of hanging.
"""
import datetime
import sys
import time

import torch
import torch.distributed as dist

import meshtrain.torch  # noqa: F401

dist.init_process_group("meshtrain", timeout=datetime.timedelta(seconds=3))
rank = dist.get_rank()
dist.barrier()
if rank == 1:
    time.sleep(12)  # never joins the all_reduce below
    sys.exit(0)
start = time.monotonic()
try:
    dist.all_reduce(torch.ones(1000))
except dist.DistBackendError as e:
    took = time.monotonic() - start
    msg = str(e)
    print(f"rank 0 after {took:.1f} s: {msg.splitlines()[0]}")
    ok = "allreduce" in msg and "rank 1" in msg and "timed out after 3.0 s" in msg and 2.5 < took < 10
    sys.exit(0 if ok else 1)
print("rank 0: all_reduce returned without its peer", file=sys.stderr)
sys.exit(1)
