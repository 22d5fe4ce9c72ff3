"""Training runs launched from Python: the CLI's `meshtrain train` in a child
process (N local ranks with nproc > 1), its step records read as they are
written, so Python adds nothing to the step itself."""
import json
import os
import subprocess
import time
from typing import Any, Iterator, Mapping, Optional, Sequence

from meshtrain._cli import MeshtrainError, binary, config_args
from meshtrain.config import load_config
from meshtrain.telemetry import read_memory, read_metrics


class Run:
    """A training run in progress or finished. Iterate steps() for its
    records as they arrive; wait() for its end."""

    def __init__(self, proc, run_dir, log_path, resolved):
        self.proc, self.run_dir, self.log_path, self.config = proc, run_dir, log_path, resolved

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: Optional[float] = None) -> int:
        """Waits for the run to end; raises MeshtrainError (with the end of
        its log) when it failed. Returns the exit status (0)."""
        status = self.proc.wait(timeout)
        if status != 0:
            raise MeshtrainError(f"meshtrain train exited {status}: {self.log_tail()}")
        return status

    def log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return " | ".join(ln.strip() for ln in f.read().splitlines()[-lines:])
        except OSError:
            return ""

    def steps(self, poll_s: float = 0.1) -> Iterator[dict]:
        """Yields each record of metrics.jsonl (a dict per step or evaluation)
        as it is written, until the run ends; then raises if it failed."""
        path = os.path.join(self.run_dir, "metrics.jsonl")
        offset, pending = 0, ""
        while True:
            alive = self.running()
            if os.path.exists(path):
                with open(path) as f:
                    f.seek(offset)
                    chunk = f.read()
                    offset = f.tell()
                pending += chunk
                *complete, pending = pending.split("\n")
                for line in complete:
                    if line.strip():
                        yield json.loads(line)
            if not alive:
                break
            time.sleep(poll_s)
        self.wait()

    def metrics(self, as_frame: bool = False) -> Any:
        return read_metrics(self.run_dir, as_frame)

    def memory(self) -> list:
        return read_memory(self.run_dir)


def train(config: Optional[str] = None, overrides: Optional[Mapping[str, Any]] = None, nproc: int = 1,
          extra_args: Sequence[str] = ()) -> Run:
    """Starts `meshtrain train` on the configuration (validated first: a bad
    one raises MeshtrainError here) and returns its Run. nproc > 1 trains
    data-parallel on that many local processes, as --nproc does."""
    overrides = dict(overrides or {})
    resolved = load_config(config, overrides, nproc)
    run_dir = resolved["telemetry"]["dir"]
    os.makedirs(run_dir, exist_ok=True)
    log_path = os.path.join(run_dir, "python_launch.log")
    args = [binary(), "train"] + config_args(config, overrides) + list(extra_args)
    if nproc > 1:
        args += ["--nproc", str(nproc)]
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(metrics) and resolved.get("checkpoint", {}).get("resume") == "never":
        os.remove(metrics)  # a fresh run rewrites it; do not read the last run's records
    log = open(log_path, "w")
    env = dict(os.environ, MESHTRAIN_PROGRESS="plain")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()
    return Run(proc, run_dir, log_path, resolved)
