#!/usr/bin/env bash
# `pip wheel` of the repository (pyproject.toml, scikit-build-core) reusing
# this build tree, installed into a fresh virtual environment: the wheel's
# own CLI runs (as `meshtrain` and `python -m meshtrain`), the package finds
# the binary inside itself, and its torch backend runs an all_reduce on 2
# ranks under torchrun. Usage: wheel.sh <python with torch and
# scikit-build-core> <source dir> <build dir>
set -euo pipefail
py=$1 src=$2 build=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -c "import scikit_build_core, torch" 2>/dev/null; then
  echo "skipped: $py lacks scikit_build_core or torch (tests/python-requirements.txt)"; exit 77
fi
# The tree's generator: scikit-build-core would pick Ninja where it exists.
export CMAKE_GENERATOR
CMAKE_GENERATOR=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$build/CMakeCache.txt")
"$py" -m pip wheel --no-build-isolation --no-deps -q -w "$tmp/dist" -C build-dir="$build" "$src" \
  >"$tmp/wheel.log" 2>&1 || { tail -30 "$tmp/wheel.log"; echo "FAIL: pip wheel"; exit 1; }
wheel=$(ls "$tmp"/dist/meshtrain-*.whl)
echo "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
"$py" -m venv "$tmp/venv"
# torch from the test environment (the wheel does not pull it).
site=$("$tmp/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" >"$site/test_env_torch.pth"
"$tmp/venv/bin/pip" install -q --no-deps --no-index "$wheel"
cd "$tmp"  # nothing of the repository on the path
where=$("$tmp/venv/bin/python" -c "import meshtrain; print(meshtrain.binary())")
case "$where" in "$site"/meshtrain/bin/meshtrain) ;; *) echo "FAIL: binary found at $where, not in the wheel"; exit 1 ;; esac
"$tmp/venv/bin/meshtrain" --version | head -1
"$tmp/venv/bin/python" -m meshtrain --version >/dev/null
cat >"$tmp/ar.py" <<'PY'
import torch, torch.distributed as dist
import meshtrain.torch
dist.init_process_group("meshtrain")
t = torch.full((1000,), float(dist.get_rank() + 1))
dist.all_reduce(t)
assert bool((t == 3).all()), t[:4]
assert meshtrain.torch.__file__.startswith(__import__("sysconfig").get_paths()["purelib"])
dist.destroy_process_group()
PY
OMP_NUM_THREADS=1 "$tmp/venv/bin/python" -m torch.distributed.run --standalone --nproc-per-node 2 "$tmp/ar.py" \
  >"$tmp/ar.log" 2>&1 || { tail -20 "$tmp/ar.log"; echo "FAIL: all_reduce from the wheel"; exit 1; }
echo "wheel: installs, its CLI runs, its torch backend reduces on 2 ranks"
