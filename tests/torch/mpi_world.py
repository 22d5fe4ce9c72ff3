"""The meshtrain backend as the whole job of an mpirun: torch's ranks are
MPI's, the world group runs on meshtrain's MPI transport
(MESHTRAIN_COMM_TRANSPORT=mpi: what a job across hosts gets), and a
sub-group of ranks on this host runs over shared memory. Started by
mpi_world.sh with the FileStore path as argv[1]."""
import os
import sys

import torch
import torch.distributed as dist

import meshtrain.torch  # noqa: F401

rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
dist.init_process_group("meshtrain", init_method=f"file://{sys.argv[1]}", rank=rank, world_size=world)
t = torch.full((100000,), float(rank + 1))
dist.all_reduce(t)
assert bool((t == world * (world + 1) / 2).all()), t[:4]
out = [torch.empty(3, dtype=torch.int64) for _ in range(world)]
dist.all_gather(out, torch.full((3,), rank, dtype=torch.int64))
assert [int(o[0]) for o in out] == list(range(world)), out
pair = dist.new_group([0, 1])
if rank < 2:
    s = torch.ones(10)
    dist.all_reduce(s, group=pair)
    assert bool((s == 2).all()), s
dist.barrier()
print(f"rank {rank} of {world}: world over MPI and a sub-group over shared memory agree")
dist.destroy_process_group()
