"""Type stub of the compiled module python/csrc/torch_backend/module.cpp."""
from datetime import timedelta

import torch.distributed

def create_backend(store: torch.distributed.Store, rank: int, size: int,
                   timeout: timedelta) -> torch.distributed.Backend: ...
