#!/usr/bin/env python3
"""Generation speed with the KV cache against recomputing the context for
every token (`meshtrain sample --no-kv-cache`, the path generation took
before the cache), same model, prompt, token count and threads, alternated,
medians. Models are presets with random weights (the work per token does not
depend on the weights).

  python3 bench/generate_kv_cache.py --presets char-6L llama-char --tokens 256 --rounds 3
"""
import argparse
import os
import re
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tokens_per_s(cmd):
    err = subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True).stderr
    m = re.search(r"generated (\d+) tokens .*: ([0-9.]+) tokens/s", err)
    if not m:
        raise SystemExit(f"no figure in: {err}")
    return float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", nargs="+", default=["char-6L", "llama-char"])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "meshtrain"))
    a = ap.parse_args()
    for preset in a.presets:
        base = [a.binary, "sample", "--preset", preset, "--tokens", str(a.tokens), "--threads",
                str(a.threads), "--prompt", "The ", "--temperature", "0"]
        on, off = [], []
        for r in range(a.rounds):
            on.append(tokens_per_s(base))
            off.append(tokens_per_s(base + ["--no-kv-cache"]))
            print(f"{preset} round {r + 1}: KV cache {on[-1]:.1f} tokens/s, recompute {off[-1]:.1f}",
                  flush=True)
        print(f"{preset}: {a.tokens} tokens, {a.threads} thread(s): KV cache "
              f"{statistics.median(on):.1f} tokens/s, recompute {statistics.median(off):.1f}, "
              f"ratio {statistics.median(on) / statistics.median(off):.1f}x")


if __name__ == "__main__":
    main()
