#!/usr/bin/env python3
"""meshtrain's distributed multiply beside ScaLAPACK's pdgemm, same matrices
(linalg/matrix_values.h's function of the global indices, which the peer
shares), same grid and block size, the same OpenBLAS kernels (the peer gets
meshtrain's OPENBLAS_CORETYPE), one thread per rank, runs interleaved;
medians of --rounds. Ours: `meshtrain bench matmul -n P` (shm transport).
The peer: `mpirun -n P build/bin/pdgemm_peer` (bench/peers/pdgemm_peer.cpp,
built when libscalapack-openmpi-dev is installed). Both check their error.

    python3 bench/matmul_vs_pdgemm.py                 # the cases of docs/PERFORMANCE.md
    python3 bench/matmul_vs_pdgemm.py --quick         # smaller shapes, one round
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import MESHTRAIN, ROOT, cpu_model, print_table  # noqa: E402

PEER = os.path.join(ROOT, "build", "bin", "pdgemm_peer")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

# name, ranks, m, n, k, ScaLAPACK grid, our algorithm and grid
CASES = [
    ("square", 2, 4096, 4096, 4096, "1x2", "1d", "1x2"),
    ("square", 2, 4096, 4096, 4096, "1x2", "summa", "1x2"),
    ("tall-skinny", 2, 65536, 1024, 1024, "2x1", "1d", "2x1"),
    ("short-wide (k)", 2, 1024, 1024, 65536, "1x2", "splitk", "2x1"),
    ("square, 4 ranks on 2 cores", 4, 2048, 2048, 2048, "2x2", "cannon", "2x2"),
]
QUICK = [
    ("square", 2, 1024, 1024, 1024, "1x2", "1d", "1x2"),
    ("tall-skinny", 2, 16384, 512, 512, "2x1", "1d", "2x1"),
]


def last_json(out):
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line in:\n" + out)


def ours(binary, c, nb, iters):
    name, P, m, n, k, _, algo, grid = c
    cmd = [binary, "bench", "matmul", "-n", str(P), "--m", str(m), "--n", str(n), "--k", str(k),
           "--algo", algo, "--grid", grid, "--nb", str(nb), "--iters", str(iters), "--json"]
    return last_json(subprocess.run(cmd, env=ENV, check=True, capture_output=True, text=True).stdout)


def openblas_kernels(binary):
    """The OpenBLAS kernels meshtrain runs on this CPU ("Cooperlake" from its
    --version line "f32 GEMM: OpenBLAS 0.3.21 (Cooperlake kernels)"). OpenBLAS
    0.3.21 does not know some CPUs (Emerald Rapids) and falls back to its SSE3
    kernels, about 4x slower; meshtrain sets OPENBLAS_CORETYPE then, so the peer
    gets the same kernels through the same variable."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"OpenBLAS [^(]*\((\w+) kernels\)", out)
    return m.group(1) if m else None


def peer(c, nb, iters):
    name, P, m, n, k, grid, _, _ = c
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(P), PEER, "--m", str(m), "--n",
           str(n), "--k", str(k), "--grid", grid, "--nb", str(nb), "--reps", str(iters)]
    return last_json(subprocess.run(cmd, env=ENV, check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--nb", type=int, default=256)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--binary", default=MESHTRAIN)
    a = ap.parse_args()
    if not os.path.exists(PEER):
        sys.exit(f"{PEER} is missing: install libscalapack-openmpi-dev (scripts/install-deps.sh) and rebuild")
    kernels = openblas_kernels(a.binary)
    if kernels:
        ENV["OPENBLAS_CORETYPE"] = kernels
    cases = QUICK if a.quick else CASES
    rounds = 1 if a.quick else a.rounds
    rows = []
    for c in cases:
        o, p = [], []
        for _ in range(rounds):  # interleaved
            r = ours(a.binary, c, a.nb, a.iters)
            q = peer(c, a.nb, a.iters)
            if not (r["error_ok"] and q["error_ok"]):
                sys.exit(f"error check failed: ours {r['error']}, pdgemm {q['error']}")
            o.append(r)
            p.append(q)
        og = statistics.median(x["gflops"] for x in o)
        pg = statistics.median(x["gflops"] for x in p)
        single = statistics.median(x["single_rank_gflops"] for x in o)
        name, P, m, n, k, pgrid, algo, grid = c
        rows.append([name, f"{m}x{n}x{k}", str(P), f"{algo} {grid}", f"{og:.1f}", f"{pgrid}", f"{pg:.1f}",
                     f"{og / pg:.2f}x", f"{single:.1f}", f"{100 * og / (P * single):.0f}%",
                     f"{100 * pg / (P * single):.0f}%",
                     f"{o[-1]['words_per_rank'] / o[-1]['formula_words']:.2f}" if o[-1]["formula_words"] else "-"])
    print_table(f"f64, nb {a.nb}, one thread per rank, medians of {rounds} interleaved rounds x {a.iters} runs; "
                f"OpenBLAS kernels {kernels or 'as it picks'} for both; {cpu_model()}",
                ["shape", "m x n x k", "ranks", "ours", "GFLOP/s", "pdgemm grid", "pdgemm GFLOP/s", "ratio",
                 "1-rank dgemm", "ours / P x 1-rank", "pdgemm / P x 1-rank", "words / formula"], rows)


if __name__ == "__main__":
    main()
