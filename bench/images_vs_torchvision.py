#!/usr/bin/env python3
"""The image input pipeline against torchvision's transforms, per core:
decoding real JPEG files plus the training augmentation (random-resized-crop
to 224, flip, normalization) or the evaluation view (resize, center crop),
meshtrain (`meshtrain bench images`, one worker thread) and torchvision
(tools/peers/bench_images_torchvision.py: Pillow decoding, torchvision's
transforms, one thread) both pinned to one CPU, on the same JPEG bytes,
alternating rounds; medians of images per CPU-second. Then meshtrain with the
default workers on the whole machine (images/s of wall time), the rate
training's prefetcher can feed.

The JPEGs are tools/make_jpeg_folder.py's photo-like images (ImageNet's
sizes, ~70 KB each), made once under --work and turned into shards by
`meshtrain data prepare-images --folder`.

  python3 bench/images_vs_torchvision.py --rounds 3 --seconds 5
"""
import argparse
import os
import statistics
import subprocess
import sys

from bench_util import MESHTRAIN, ROOT, cpu_model, print_table, run_json


def ensure_shards(binary, work, images):
    folder, shards = os.path.join(work, "jpegs"), os.path.join(work, "shards")
    if not os.path.exists(os.path.join(shards, "meta.json")):
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_jpeg_folder.py"), "--out",
                        folder, "--images", str(images)], check=True)
        subprocess.run([binary, "data", "prepare-images", "--folder", folder, "--out", shards],
                       check=True, stdout=subprocess.DEVNULL)
    return os.path.join(shards, "train-*.tar")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=MESHTRAIN)
    ap.add_argument("--work", default="/tmp/meshtrain-bench-images")
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--cpu", default="0", help="the CPU both sides are pinned to")
    a = ap.parse_args()
    data = ensure_shards(a.binary, a.work, a.images)
    peer = os.path.join(ROOT, "tools", "peers", "bench_images_torchvision.py")
    pin = ["taskset", "-c", a.cpu]
    views = [("training", []), ("evaluation", ["--eval"])]
    res = {v: {"ours": [], "peer": []} for v, _ in views}
    default_workers, versions = [], ""
    for r in range(a.rounds):
        for view, flag in views:
            ours = run_json(pin + [a.binary, "bench", "images", "--data", data, "--workers", "1",
                                   "--size", str(a.size), "--seconds", str(a.seconds), "--json"] + flag, 1)
            theirs = run_json(pin + [sys.executable, peer, "--data", data, "--size", str(a.size),
                                     "--seconds", str(a.seconds)] + flag, 1)
            res[view]["ours"].append(ours["images_per_cpu_s"])
            res[view]["peer"].append(theirs["images_per_cpu_s"])
            versions = f"torchvision {theirs['torchvision']}, Pillow {theirs['pillow']}"
            print(f"round {r + 1} {view}: meshtrain {ours['images_per_cpu_s']:.0f}, torchvision "
                  f"{theirs['images_per_cpu_s']:.0f} images per CPU-second", flush=True)
        full = run_json([a.binary, "bench", "images", "--data", data, "--size", str(a.size),
                         "--seconds", str(a.seconds), "--json"], 1)
        default_workers.append(full["images_per_s"])
        print(f"round {r + 1}: meshtrain default workers ({full['workers']}), whole machine: "
              f"{full['images_per_s']:.0f} images/s", flush=True)
    rows = []
    for view, _ in views:
        o, p = statistics.median(res[view]["ours"]), statistics.median(res[view]["peer"])
        rows.append([view, f"{o:.0f}", f"{p:.0f}", f"**{o / p:.2f}x**"])
    print_table(f"JPEG decoding + {a.size}x{a.size} view + normalization, one CPU each, medians of "
                f"{a.rounds} alternating rounds; {cpu_model()}; {versions}",
                ["view", "meshtrain images/CPU-s", "torchvision images/CPU-s", "ratio"], rows)
    print(f"\nmeshtrain, default workers, whole machine ({os.cpu_count()} CPUs): "
          f"{statistics.median(default_workers):.0f} images/s (median)")


if __name__ == "__main__":
    main()
