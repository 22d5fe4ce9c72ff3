"""The planner: ranked dp x tp x pp layouts for a model on a cluster."""
import json
from typing import Any, Optional

from meshtrain._cli import run_cli


def plan(model: str, cluster: str, gpus: int, global_batch: Optional[int] = None, top: int = 5,
         **fixed: Any) -> dict:
    """Runs `meshtrain plan --json` and returns its result as a dict (the
    ranked layouts with their predicted step time, memory and cost). `fixed`
    takes the CLI's other options by name: seq=2048, tp=8, zero=1,
    optimizer="adamw", precision="bf16", ..."""
    args = ["plan", "--json", "--model", model, "--cluster", cluster, "--gpus", gpus, "--top", top]
    if global_batch is not None:
        args += ["--global-batch", global_batch]
    for key, value in fixed.items():
        args += [f"--{key.replace('_', '-')}", value]
    return json.loads(run_cli(args))
