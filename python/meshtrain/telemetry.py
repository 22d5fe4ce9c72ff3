"""A run's telemetry as Python objects: the step records of metrics.jsonl,
the memory report (memory.json) and the final summary, from a run directory
(`telemetry.dir` of the configuration)."""
import json
import os
from typing import Any, List


def _read_jsonl(path):
    records = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                records.append(json.loads(line))
    return records


def read_metrics(run_dir: str, as_frame: bool = False) -> Any:
    """Every record of RUN_DIR/metrics.jsonl (one per step and per evaluation)
    as dicts, or a pandas DataFrame with as_frame=True."""
    records = _read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    if as_frame:
        import pandas as pd  # optional dependency
        return pd.DataFrame.from_records(records)
    return records


def read_memory(run_dir: str) -> List[dict]:
    """RUN_DIR/memory.json: one dict per rank, its predicted and measured
    (peak) memory per category."""
    with open(os.path.join(run_dir, "memory.json")) as f:
        return json.load(f)
