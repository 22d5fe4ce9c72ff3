#!/usr/bin/env bash
# Makes, or reuses, the Python virtual environment in which the tests check
# meshtrain's exports with the libraries users load them in (torch,
# transformers, safetensors, tensorboard: tests/python-requirements.txt), and
# prints its python's path. scripts/test.sh runs it and passes that path to the
# tests as MESHTRAIN_PYTHON.
#
# Where: $MESHTRAIN_PYENV_DIR, by default /var/cache/meshtrain/pyenv as root,
# else ~/.cache/meshtrain/pyenv (outside the clone, so each clone and CI run on
# a machine reuses it), one environment per hash of the requirements (comments
# aside) and the base python3 (each ~5.7 GB; an old one can be deleted by hand). A lock
# serializes concurrent runs, and the marker file that makes an environment
# reusable is written last, after every package imported: an interrupted
# install is never taken as complete, and the next run starts it again.
#
# Install: plain `pip install -r` with dependencies. PyPI's Linux x86-64 torch
# is its CUDA build, and it pulls ~2.5 GB of nvidia-* wheels and triton (~3 GB
# downloaded, 5.7 GB installed). Installing torch alone (--no-deps) does not
# work: libtorch.so links libtorch_cuda.so, which links cudart, cublas, cudnn,
# nccl, ..., so `import torch` fails (ImportError: libcufile.so.0); the CPU-only
# wheels are on download.pytorch.org, not PyPI. pip byte-compiles the ~11k modules as it installs
# (~40 s of the install): with PYTHONDONTWRITEBYTECODE set, as on some machines,
# Python would otherwise compile torch and transformers again in every check
# (~8 s each). Measured on 2 cores (AMD EPYC Zen 4, Debian 12's python3): a
# first install took 127 s (most of it downloading and unpacking; up to ~7 min
# while a C++ build loaded both cores), a reuse under a second
# (docs/ARCHITECTURE.md, "What this costs CI").
#
# Exit status: 0 with the python's path on stdout; 3 when the package index
# cannot be reached, with the reason on stdout (the tests then skip, saying
# so); 1 on any other failure (a failed install or import), with pip's log.
set -euo pipefail
cd "$(dirname "$0")/.."
req=$PWD/tests/python-requirements.txt
index=${PIP_INDEX_URL:-https://pypi.org/simple}
say() { echo "python-env: $*" >&2; }

base=$(command -v python3) || { say "no python3 (scripts/install-deps.sh installs it)"; exit 1; }
base_id=$("$base" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version)')
# The key: the requirement lines (not the comments) and the base interpreter.
key=$( { sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$req" | grep -v '^$'; echo "$base_id"; } |
  sha256sum | cut -c1-16)
if [ -n "${MESHTRAIN_PYENV_DIR:-}" ]; then
  dir=$MESHTRAIN_PYENV_DIR
elif [ "$(id -u)" -eq 0 ]; then
  dir=/var/cache/meshtrain/pyenv
else
  dir=${XDG_CACHE_HOME:-$HOME/.cache}/meshtrain/pyenv
fi
venv=$dir/$key
marker=$venv/.meshtrain-complete
log=$dir/$key.log
mkdir -p "$dir"
exec 9>"$dir/$key.lock"
flock 9  # another run making the same environment: wait for it

modules=(torch transformers safetensors tensorboard kubernetes_validate)
present() {  # the marker, a working interpreter and every package in place
  [ -f "$marker" ] && [ "$(head -n1 "$marker")" = "$key" ] &&
    "$venv/bin/python" -c 'import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in sys.argv[1:]))' "${modules[@]}" 2>/dev/null
}
if present; then
  say "reusing $venv"
  echo "$venv/bin/python"
  exit 0
fi

[ -e "$venv" ] && say "removing the unfinished or broken environment $venv"
rm -rf "$venv"
say "making $venv from $(basename "$req") (first time: downloads ~3 GB, a few minutes)"
if ! "$base" -m venv "$venv" >"$log" 2>&1; then
  cat "$log" >&2
  say "'python3 -m venv' failed (Debian: apt-get install python3-venv; scripts/install-deps.sh --tests does)"
  rm -rf "$venv"
  exit 1
fi
if ! "$venv/bin/python" -m pip install --no-cache-dir --progress-bar off \
       -r "$req" >>"$log" 2>&1; then
  # Unreachable index (the one case the tests may skip for) or a real failure?
  if ! "$venv/bin/python" -m pip index versions pip --retries 1 --timeout 20 >/dev/null 2>&1; then
    rm -rf "$venv"
    say "the package index $index cannot be reached (pip's log: $log)"
    echo "the Python environment for these checks could not be made: the package index $index cannot be reached"
    exit 3
  fi
  tail -n 40 "$log" >&2
  rm -rf "$venv"
  say "pip install -r $req failed (the index is reachable; whole log: $log)"
  exit 1
fi
# Every package must import and torch must compute on the CPU before the
# environment counts as made.
if ! "$venv/bin/python" - >>"$log" 2>&1 <<'PY'; then
import safetensors, tensorboard, torch, transformers
from safetensors.torch import load_file
from tensorboard.backend.event_processing import event_accumulator
from transformers import GPT2LMHeadModel, LlamaForCausalLM
x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
assert (x @ x.T).tolist() == [[5.0, 14.0], [14.0, 50.0]], "torch computes wrongly"
print("imports ok: torch", torch.__version__, "transformers", transformers.__version__,
      "safetensors", safetensors.__version__, "tensorboard", tensorboard.__version__)
PY
  tail -n 40 "$log" >&2
  rm -rf "$venv"
  say "the installed packages do not import (whole log: $log)"
  exit 1
fi
say "$(tail -n1 "$log")"
{ echo "$key"; "$venv/bin/python" -m pip freeze; } >"$marker.tmp"
mv "$marker.tmp" "$marker"
echo "$venv/bin/python"
