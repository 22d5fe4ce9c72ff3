"""Finding and running the meshtrain binary the Python API drives."""
import os
import shutil
import subprocess
from typing import Any, List, Mapping, Optional, Sequence

_HERE = os.path.dirname(os.path.abspath(__file__))


class MeshtrainError(RuntimeError):
    """A meshtrain command failed; the message is the one the CLI printed."""


def binary() -> str:
    """The meshtrain executable: MESHTRAIN_BINARY, the one inside an installed
    wheel (meshtrain/bin/meshtrain), the build tree's (build/python/meshtrain
    sits beside build/bin/meshtrain), else `meshtrain` on PATH."""
    candidates = [os.environ.get("MESHTRAIN_BINARY"),
                  os.path.join(_HERE, "bin", "meshtrain"),
                  os.path.join(_HERE, "..", "..", "bin", "meshtrain"),
                  shutil.which("meshtrain")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise MeshtrainError("no meshtrain binary: set MESHTRAIN_BINARY, build the repository "
                         "(build/bin/meshtrain) or install the wheel")


def run_cli(args: Sequence[Any], cwd: Optional[str] = None) -> str:
    """Runs `meshtrain ARGS`, returns its standard output; a failure raises
    MeshtrainError with what the command printed on standard error."""
    proc = subprocess.run([binary()] + [str(a) for a in args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        message = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise MeshtrainError(message[-1] if message else f"meshtrain {args[0]} exited {proc.returncode}")
    return proc.stdout


def config_args(config: Optional[str] = None, overrides: Optional[Mapping[str, Any]] = None) -> List[str]:
    """--config and --set arguments from a path and a {key: value} mapping."""
    args = ["--config", os.fspath(config)] if config else []
    for key, value in (overrides or {}).items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        args += ["--set", f"{key}={value}"]
    return args
