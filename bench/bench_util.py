"""Helpers shared by the interleaved benchmark scripts in bench/."""
import json
import os
import platform
import subprocess

# The repository's root, and the meshtrain binary the benchmarks run by default.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MESHTRAIN = os.path.join(ROOT, "build", "bin", "meshtrain")


def add_bench_options(ap, preset, batch, seq, threads, rounds, steps, threads_help=None):
    """Adds the options the interleaved benchmarks share to the ArgumentParser `ap`,
    with the script's defaults: --preset, --batch, --seq (0: the preset's context),
    --threads (a list default takes one or more counts, one run each; an int one
    count), --rounds, --steps (timed steps a run) and --binary (default MESHTRAIN).
    Script-specific options go after these."""
    ap.add_argument("--preset", default=preset)
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--seq", type=int, default=seq)
    ap.add_argument("--threads", type=int, nargs="+" if isinstance(threads, list) else None,
                    default=threads, help=threads_help)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--binary", default=MESHTRAIN)


def print_table(caption, header, rows):
    """Prints a blank line, the caption, then a Markdown table: the header's
    column names and one line for each row (a list of cells, as strings)."""
    print()
    print(caption)
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


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


# Environment that caps each side's CPU dispatch at an ISA level, so a run on
# an AVX-512 machine measures what an AVX2 one runs (clock and caches aside).
# meshtrain: MESHTRAIN_ISA (it caps its OpenBLAS and oneDNN itself). PyTorch:
# its own kernels (ATEN_CPU_CAPABILITY), MKL and its oneDNN.
ISA_CAPS = {
    "scalar": ({"MESHTRAIN_ISA": "scalar"},
               {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                "ONEDNN_MAX_CPU_ISA": "SSE41"}),
    "avx2": ({"MESHTRAIN_ISA": "avx2"},
             {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
              "ONEDNN_MAX_CPU_ISA": "AVX2"}),
    "avx512": ({"MESHTRAIN_ISA": "avx512"},
               {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512",
                "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}),
}


def isa_env(level, side):
    """The variables that cap `side` ("ours" or "peer") at `level` (None: no cap)."""
    if not level:
        return {}
    ours, peer = ISA_CAPS[level]
    return ours if side == "ours" else peer


def run_json(cmd, threads, extra_env=None):
    """Runs cmd with every thread pool pinned to `threads` (and extra_env) and
    returns the last JSON object it printed on a line of its own."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), **(extra_env or {}))
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"exit status {res.returncode} from {' '.join(cmd)}:\n"
                           f"{res.stderr[-2000:] or res.stdout[-2000:]}")
    out = res.stdout
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"no JSON line from {' '.join(cmd)}")
    return json.loads(lines[-1])


def synth_grammar_data(binary, data, tokens=4000000):
    """Writes `tokens` of the synthetic grammar (`meshtrain data synth`) into the
    folder `data` and returns the grammar's entropy rate in nats per token (the
    floor of the loss). Exits with the tool's output if it fails or records none."""
    import sys
    synth = subprocess.run([binary, "data", "synth", "--out", data, "--tokens", str(tokens)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if synth.returncode != 0:
        sys.exit(synth.stdout)
    entropy = None
    for name in os.listdir(data):
        if name.endswith(".json"):
            with open(os.path.join(data, name)) as f:
                entropy = json.load(f).get("entropy_nats_per_token", entropy)
    if entropy is None:
        sys.exit(f"no entropy record in {data}")
    return entropy
