"""The "meshtrain" torch.distributed backend.

    import meshtrain.torch  # registers it
    torch.distributed.init_process_group("meshtrain")          # CPU tensors
    torch.distributed.init_process_group("cpu:meshtrain,cuda:nccl")

Each process group runs on its own meshtrain communicator over shared memory
between the ranks of one host (docs/TORCH.md has the operations, dtypes and
where the semantics differ from gloo's).
"""
import torch.distributed as _dist

from meshtrain import _torch_backend

if "meshtrain" not in _dist.Backend.backend_list:
    _dist.Backend.register_backend("meshtrain", _torch_backend.create_backend, devices=["cpu"])

__all__ = []
