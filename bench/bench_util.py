"""Helpers shared by the interleaved benchmark scripts in bench/."""
import json
import os
import platform
import subprocess


def cpu_model():
    """The CPU's model name as /proc/cpuinfo gives it, for the tables' captions."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run_json(cmd, threads):
    """Runs cmd with every thread pool pinned to `threads` and returns the last
    JSON object it printed on a line of its own."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads))
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"exit status {res.returncode} from {' '.join(cmd)}:\n"
                           f"{res.stderr[-2000:] or res.stdout[-2000:]}")
    out = res.stdout
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"no JSON line from {' '.join(cmd)}")
    return json.loads(lines[-1])
