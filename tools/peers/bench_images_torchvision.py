#!/usr/bin/env python3
"""The peer of `meshtrain bench images`: torchvision's transforms on Pillow
images, as an ImageFolder dataset's __getitem__ runs them (Image.open +
convert("RGB"), then RandomResizedCrop + RandomHorizontalFlip + ToTensor +
Normalize, or Resize(size * 8 / 7) + CenterCrop for evaluation), on the JPEG
members of meshtrain's image shards (the same bytes, read into memory first
so neither side times the disk), in one process and one thread. Prints one
JSON line: images, wall_s, cpu_s, images_per_s, images_per_cpu_s.

  python3 tools/peers/bench_images_torchvision.py --data '/tmp/shards/train-*.tar' --seconds 5
"""
import argparse
import glob
import io
import json
import random
import tarfile
import time

import PIL
import torch
import torchvision
from PIL import Image
from torchvision import transforms as T


def shard_images(pattern):
    out = []
    for path in sorted(glob.glob(pattern)):
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                if m.name.endswith((".jpg", ".png")):
                    out.append(tar.extractfile(m).read())
    if not out:
        raise SystemExit(f"no .jpg or .png member in {pattern}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--eval", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    images = shard_images(a.data)
    norm = T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    if a.eval:
        tf = T.Compose([T.Resize(a.size * 8 // 7), T.CenterCrop(a.size), T.ToTensor(), norm])
    else:
        tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    order = list(range(len(images)))
    random.Random(1).shuffle(order)

    def load(i):
        return tf(Image.open(io.BytesIO(images[order[i % len(order)]])).convert("RGB"))

    for i in range(8):  # warm-up
        load(i)
    n, wall0, cpu0 = 0, time.perf_counter(), time.process_time()
    while True:
        load(n)
        n += 1
        wall = time.perf_counter() - wall0
        if wall >= a.seconds:
            break
    cpu = time.process_time() - cpu0
    print(json.dumps({"images": n, "wall_s": wall, "cpu_s": cpu, "images_per_s": n / wall,
                      "images_per_cpu_s": n / cpu, "torchvision": torchvision.__version__,
                      "pillow": PIL.__version__}))


if __name__ == "__main__":
    main()
