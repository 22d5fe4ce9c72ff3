#!/usr/bin/env python3
"""Regenerate the image-decoding fixtures for meshtrain's data layer.

Writes small JPEGs and PNGs under tests/fixtures/images/ (odd sizes, every
color type the decoder handles) with Pillow, and beside each Pillow's own
decoded pixels as raw bytes (HWC, row-major):
  NAME.rgb   Image.open(NAME).convert("RGB"), height x width x 3
  NAME.gray  Image.open(NAME).convert("L"), height x width, for grayscale
             sources only (what meshtrain's ColorMode::KeepGray returns)
and manifest.json: {"NAME": {"width", "height", "gray": bool, "mode": the
source's Pillow mode, "format"}}. tests/unit/image_data_test.cpp requires
meshtrain's decoder to give exactly these bytes: PNG is lossless and
libjpeg-turbo (which Pillow also decodes with) with the same settings (the
libjpeg defaults: JDCT_ISLOW integer IDCT, fancy upsampling, block smoothing
for progressive scans, no scaling) is bit-exact between its versions.

Deterministic (fixed seed). Usage (needs Pillow and numpy):
  python3 tools/make_image_fixtures.py [--out-dir tests/fixtures/images]
"""
import argparse
import json
import os

import numpy as np
from PIL import Image

SEED = 20261128


def pattern(rng, h, w, channels):
    """A smooth gradient plus noise: JPEG's chroma and detail both matter."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = [
        128 + 100 * np.sin(x / 5.0 + c) * np.cos(y / 7.0 - c) for c in range(channels)
    ]
    img = np.stack(base, axis=-1) + rng.normal(0, 18, size=(h, w, channels))
    return np.clip(img, 0, 255).astype(np.uint8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "images"))
    args = ap.parse_args()
    out = os.path.abspath(args.out_dir)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    images = {}

    # JPEG: baseline 4:2:0, progressive 4:2:2, grayscale, baseline 4:4:4 (larger ones below).
    rgb = Image.fromarray(pattern(rng, 23, 37, 3), "RGB")
    rgb.save(os.path.join(out, "rgb_baseline_37x23.jpg"), quality=85, subsampling=2)
    images["rgb_baseline_37x23.jpg"] = "JPEG"
    rgb2 = Image.fromarray(pattern(rng, 29, 41, 3), "RGB")
    rgb2.save(os.path.join(out, "rgb_progressive_41x29.jpg"), quality=80, subsampling=1,
              progressive=True)
    images["rgb_progressive_41x29.jpg"] = "JPEG"
    rgb3 = Image.fromarray(pattern(rng, 17, 25, 3), "RGB")
    rgb3.save(os.path.join(out, "rgb_444_25x17.jpg"), quality=90, subsampling=0)
    images["rgb_444_25x17.jpg"] = "JPEG"
    gray = Image.fromarray(pattern(rng, 19, 33, 1)[:, :, 0], "L")
    gray.save(os.path.join(out, "gray_33x19.jpg"), quality=75)
    images["gray_33x19.jpg"] = "JPEG"

    # PNG: RGB, RGBA, gray, gray+alpha, palette with transparency, 1-bit.
    Image.fromarray(pattern(rng, 23, 37, 3), "RGB").save(os.path.join(out, "rgb_37x23.png"))
    images["rgb_37x23.png"] = "PNG"
    Image.fromarray(pattern(rng, 17, 23, 4), "RGBA").save(os.path.join(out, "rgba_23x17.png"))
    images["rgba_23x17.png"] = "PNG"
    Image.fromarray(pattern(rng, 13, 31, 1)[:, :, 0], "L").save(os.path.join(out, "gray_31x13.png"))
    images["gray_31x13.png"] = "PNG"
    Image.fromarray(pattern(rng, 11, 15, 2), "LA").save(os.path.join(out, "gray_alpha_15x11.png"))
    images["gray_alpha_15x11.png"] = "PNG"
    pal = Image.fromarray(pattern(rng, 21, 19, 3), "RGB").quantize(colors=16, method=Image.MEDIANCUT)
    pal.info["transparency"] = 3
    pal.save(os.path.join(out, "palette_19x21.png"), transparency=3)
    images["palette_19x21.png"] = "PNG"
    bits = Image.fromarray((pattern(rng, 9, 13, 1)[:, :, 0] > 128).astype(np.uint8) * 255, "L")
    bits.convert("1").save(os.path.join(out, "bilevel_13x9.png"))
    images["bilevel_13x9.png"] = "PNG"

    # Larger JPEGs (4:2:0 baseline and progressive) for decoding a region at
    # 1/1 to 1/8 of the size (several 16-pixel iMCUs each way); drawn last so
    # the images above stay byte-identical.
    Image.fromarray(pattern(rng, 121, 161, 3), "RGB").save(
        os.path.join(out, "rgb_420_161x121.jpg"), quality=85, subsampling=2)
    images["rgb_420_161x121.jpg"] = "JPEG"
    Image.fromarray(pattern(rng, 101, 133, 3), "RGB").save(
        os.path.join(out, "rgb_progressive_420_133x101.jpg"), quality=85, subsampling=2,
        progressive=True)
    images["rgb_progressive_420_133x101.jpg"] = "JPEG"

    manifest = {}
    for name, fmt in images.items():
        with Image.open(os.path.join(out, name)) as im:
            assert im.format == fmt, (name, im.format)
            mode = im.mode
            is_gray = mode in ("L", "LA", "1")
            rgb_px = np.asarray(im.convert("RGB"), dtype=np.uint8)
            rgb_px.tofile(os.path.join(out, name + ".rgb"))
            if is_gray:
                np.asarray(im.convert("L"), dtype=np.uint8).tofile(os.path.join(out, name + ".gray"))
            manifest[name] = {"width": im.width, "height": im.height, "gray": is_gray,
                              "mode": mode, "format": fmt}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
    print(f"wrote {len(manifest)} images and their pixels to {out} ({total} bytes)")


if __name__ == "__main__":
    main()
