"""Training configurations, validated by the same code the CLI runs."""
import json
from typing import Any, Mapping, Optional

from meshtrain._cli import config_args, run_cli


def load_config(config: Optional[str] = None, overrides: Optional[Mapping[str, Any]] = None,
                nproc: int = 1) -> dict:
    """The resolved configuration (a dict of every key, docs/CONFIG.md) of the
    JSON file `config` with `overrides` ({"train.lr": 3e-4, ...}) applied.
    Invalid keys, values or models raise MeshtrainError with the CLI's message
    (`meshtrain train --check`). nproc: the ranks the layout is checked for."""
    args = ["train", "--check"] + config_args(config, overrides)
    if nproc > 1:
        args += ["--nproc", str(nproc)]
    return json.loads(run_cli(args))
