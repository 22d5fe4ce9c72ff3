#!/usr/bin/env python3
"""Write an image folder of photo-like JPEGs (ImageNet's shape of data) for the
image-pipeline benchmark (bench/images_vs_torchvision.py) and for trying
`meshtrain data prepare-images --folder` on something that looks like a
user's photos.

OUT/class_K/img_N.jpg, one folder per class (torchvision's ImageFolder
layout). Sizes are drawn as ImageNet's are spread (shorter side 240-480,
aspect 3:4 to 16:9, either orientation; ImageNet's mean is ~400x350), the
content is smooth color fields at several scales plus fine texture, encoded
by Pillow at quality 90 with 4:2:0 chroma: about 0.5-0.7 bytes per pixel,
near ImageNet's ~110 KB for its mean size, so the entropy decoder works as
hard as on photos. Deterministic (seeded): the same files on every machine.

  python3 tools/make_jpeg_folder.py --out /tmp/jpegs --images 512 --classes 8
"""
import argparse
import os

import numpy as np
from PIL import Image

SEED = 20261129


def smooth_field(rng, h, w, cells):
    """Random values on a coarse grid, bilinearly enlarged to h x w x 3."""
    gh, gw = max(2, h // cells), max(2, w // cells)
    grid = rng.uniform(0, 255, size=(gh, gw, 3)).astype(np.uint8)
    return np.asarray(Image.fromarray(grid).resize((w, h), Image.BILINEAR), dtype=np.float32)


def photo_like(rng, h, w):
    img = 0.5 * smooth_field(rng, h, w, 96) + 0.3 * smooth_field(rng, h, w, 24) \
        + 0.2 * smooth_field(rng, h, w, 6)
    img += rng.normal(0, 6, size=(h, w, 1)) + rng.normal(0, 3, size=(h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def image_size(rng):
    short = int(rng.integers(240, 481))
    aspect = float(rng.uniform(4 / 3, 16 / 9)) if rng.uniform() < 0.8 else float(rng.uniform(1.0, 4 / 3))
    long_side = int(round(short * aspect))
    return (short, long_side) if rng.uniform() < 0.75 else (long_side, short)  # (h, w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--quality", type=int, default=90)
    a = ap.parse_args()
    rng = np.random.default_rng(SEED)
    total = 0
    for n in range(a.images):
        h, w = image_size(rng)
        folder = os.path.join(a.out, f"class_{n % a.classes}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"img_{n:06d}.jpg")
        Image.fromarray(photo_like(rng, h, w)).save(path, quality=a.quality, subsampling=2)
        total += os.path.getsize(path)
    print(f"{a.images} JPEGs in {a.classes} classes under {a.out}: {total / a.images / 1e3:.0f} KB each on average")


if __name__ == "__main__":
    main()
