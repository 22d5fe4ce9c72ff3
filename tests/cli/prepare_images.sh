#!/usr/bin/env bash
# `meshtrain data prepare-images`: an image-folder tree of the fixtures ->
# WebDataset shards that Python's tarfile lists in WebDataset order (KEY.jpg|png
# then KEY.cls, keys in order) with meta.json; a corrupt image fails naming it
# (default) or is skipped and reported (--on-corrupt skip); wrong flags exit 2;
# Fashion-MNIST's IDX files (when installed) -> train/test shards, timed.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
FIX="$SRC/tests/fixtures/images"

mkdir -p "$TMP/in/cat" "$TMP/in/dog" "$TMP/in/.hidden"
cp "$FIX"/*.jpg "$TMP/in/cat/"
cp "$FIX"/*.png "$TMP/in/dog/"
cp "$FIX"/rgb_37x23.png "$TMP/in/.hidden/"  # hidden folders are not classes
echo "not an image" >"$TMP/in/dog/README.txt"
n_jpg=$(ls "$FIX"/*.jpg | wc -l)
n_png=$(ls "$FIX"/*.png | wc -l)
total=$((n_jpg + n_png))

"$BIN" data prepare-images --folder "$TMP/in" --out "$TMP/out" --val-fraction 0.2 \
  --shard-samples 3 --seed 7 >"$TMP/log"
cat "$TMP/log"
grep "2 classes (cat, dog)" "$TMP/log" >/dev/null || fail "summary: classes"
grep "ignored 1 file" "$TMP/log" >/dev/null || fail "summary: ignored README.txt"
grep "skipped 0 corrupt" "$TMP/log" >/dev/null || fail "summary: skipped count"
test -s "$TMP/out/train-000000.tar" || fail "no train-000000.tar"
test -s "$TMP/out/val-000000.tar" || fail "no val-000000.tar"
test -s "$TMP/out/meta.json" || fail "no meta.json"
tar tf "$TMP/out/train-000000.tar" >"$TMP/tar_list" || fail "tar cannot list the shard"

# Python's tarfile: every shard lists KEY.ext, KEY.cls pairs with increasing
# keys; the classes are the folders; the image bytes are the sources'.
python3 - "$TMP/out" "$TMP/in" "$total" <<'PY'
import hashlib, json, os, sys, tarfile
out, src, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
meta = json.load(open(os.path.join(out, "meta.json")))
assert meta["classes"] == ["cat", "dog"], meta["classes"]
assert meta["format"] == "webdataset" and meta["channels"] == 3, meta
assert len(meta["mean"]) == 3 and all(0 < m < 1 for m in meta["mean"] + meta["std"]), meta
sources = {}
for cls in ("cat", "dog"):
    for f in os.listdir(os.path.join(src, cls)):
        if f.endswith((".jpg", ".png")):
            sources[hashlib.sha256(open(os.path.join(src, cls, f), "rb").read()).hexdigest()] = cls
n = 0
for split in ("train", "val"):
    info = meta["splits"][split]
    keys = []
    for shard in info["shards"]:
        with tarfile.open(os.path.join(out, shard)) as tf:  # checks every header's checksum
            members = tf.getmembers()
            assert len(members) % 2 == 0, [m.name for m in members]
            for img, cls in zip(members[0::2], members[1::2]):
                k, ext = img.name.split(".", 1)
                assert ext in ("jpg", "png"), img.name
                assert cls.name == k + ".cls", (img.name, cls.name)
                assert img.isfile() and img.mode == 0o644
                label = int(tf.extractfile(cls).read().decode())
                digest = hashlib.sha256(tf.extractfile(img).read()).hexdigest()
                assert meta["classes"][label] == sources[digest], (img.name, label)
                assert (ext == "jpg") == (label == 0), (img.name, label)
                keys.append(k)
    assert keys == ["%06d" % i for i in range(len(keys))], keys
    assert len(keys) == info["samples"], (split, len(keys), info)
    assert sum(info["per_class"]) == info["samples"], info
    n += len(keys)
assert n == total, (n, total)
assert meta["splits"]["val"]["samples"] == round(0.2 * total), meta["splits"]["val"]
print("tarfile: %d samples in WebDataset order" % n)
PY

# The same seed gives the same shards; another seed another order.
"$BIN" data prepare-images --folder "$TMP/in" --out "$TMP/out2" --val-fraction 0.2 \
  --shard-samples 3 --seed 7 >/dev/null
cmp "$TMP/out/train-000000.tar" "$TMP/out2/train-000000.tar" || fail "not deterministic"

# `bench images` reads the shards through the training pipeline (both views)
# and names a pattern that matches nothing.
for view in "" --eval; do
  "$BIN" bench images --data "$TMP/out/train-*.tar" --size 16 --batch 4 --seconds 0.2 --json $view \
    >"$TMP/bench_images.json" || fail "bench images $view"
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); \
assert j['images'] > 0 and j['images_per_cpu_s'] > 0 and j['eval'] == (sys.argv[2] == '--eval'), j" \
    "$TMP/bench_images.json" "$view" || fail "bench images $view: $(cat "$TMP/bench_images.json")"
done
set +e
"$BIN" bench images --data "$TMP/none-*.tar" --seconds 0.1 2>"$TMP/err" >/dev/null
rc=$?
set -e
[ "$rc" -eq 1 ] && grep "no image shards match .*none-\*.tar. (make them with" "$TMP/err" >/dev/null || { cat "$TMP/err"; fail "bench images: missing shards"; }

# A corrupt image: exit 1 naming it under the default; skipped and reported with skip.
head -c 300 "$FIX/rgb_baseline_37x23.jpg" >"$TMP/in/cat/broken.jpg"
set +e
"$BIN" data prepare-images --folder "$TMP/in" --out "$TMP/out3" 2>"$TMP/err" >/dev/null
rc=$?
set -e
cat "$TMP/err"
[ "$rc" -eq 1 ] || fail "corrupt image exited $rc, expected 1"
grep "broken.jpg: corrupt JPEG" "$TMP/err" >/dev/null || fail "corrupt image not named"
"$BIN" data prepare-images --folder "$TMP/in" --out "$TMP/out3" --on-corrupt skip >"$TMP/log3"
cat "$TMP/log3"
grep "skipped .*broken.jpg" "$TMP/log3" >/dev/null || fail "skipped file not listed"
grep "skipped 1 corrupt image" "$TMP/log3" >/dev/null || fail "skipped count"
python3 -c "import json,sys; m=json.load(open(sys.argv[1])); s=m['splits']; \
assert s['train']['samples'] + s['val']['samples'] == $total, s; assert m['skipped'] == 1" \
  "$TMP/out3/meta.json" || fail "skip: sample count"
rm "$TMP/in/cat/broken.jpg"

# train/ and val/ sub-trees are the splits.
mkdir -p "$TMP/split/train/a" "$TMP/split/train/b" "$TMP/split/val/a" "$TMP/split/val/b"
cp "$FIX"/rgb_37x23.png "$FIX"/rgba_23x17.png "$TMP/split/train/a/"
cp "$FIX"/gray_33x19.jpg "$TMP/split/train/b/"
cp "$FIX"/palette_19x21.png "$TMP/split/val/a/"
cp "$FIX"/rgb_444_25x17.jpg "$TMP/split/val/b/"
"$BIN" data prepare-images --folder "$TMP/split" --out "$TMP/out4" >"$TMP/log4"
grep "train          3 images" "$TMP/log4" >/dev/null || { cat "$TMP/log4"; fail "train/ split"; }
grep "val            2 images" "$TMP/log4" >/dev/null || { cat "$TMP/log4"; fail "val/ split"; }

# Wrong flags and values: exit 2.
expect_usage() {
  set +e
  "$BIN" data prepare-images "$@" >/dev/null 2>"$TMP/usage_err"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || { cat "$TMP/usage_err"; fail "'$*' exited $rc, expected 2"; }
}
expect_usage --folder "$TMP/in" --out "$TMP/o" --bogus
expect_usage --folder "$TMP/in"                                   # no --out
expect_usage --out "$TMP/o"                                       # no input
expect_usage --folder "$TMP/in" --idx-dir "$TMP/in" --out "$TMP/o"  # both inputs
expect_usage --folder "$TMP/in" --out "$TMP/o" --on-corrupt ignore
expect_usage --folder "$TMP/in" --out "$TMP/o" --val-fraction 1.5
expect_usage --folder "$TMP/in" --out "$TMP/o" --shard-samples 0
"$BIN" data prepare-images --help | grep -- "--on-corrupt" >/dev/null || fail "--help"

# A missing folder: exit 1 naming it.
set +e
"$BIN" data prepare-images --folder "$TMP/nope" --out "$TMP/o" 2>"$TMP/err" >/dev/null
rc=$?
set -e
[ "$rc" -eq 1 ] && grep "nope' does not exist" "$TMP/err" >/dev/null || fail "missing folder"

# Fashion-MNIST: 60000 train + 10000 test images as 1-channel 28x28 PNGs.
FM=/usr/share/datasets/fashion-mnist
if [ -f "$FM/train-images-idx3-ubyte.gz" ]; then
  start=$(date +%s.%N)
  "$BIN" data prepare-images --idx-dir "$FM" --out "$TMP/fm" --shard-samples 20000 >"$TMP/fm_log"
  end=$(date +%s.%N)
  cat "$TMP/fm_log"
  grep "train      60000 images in 3 shard" "$TMP/fm_log" >/dev/null || fail "fashion train"
  grep "test       10000 images in 1 shard" "$TMP/fm_log" >/dev/null || fail "fashion test"
  grep "images 28x28 (width x height), 1 channel" "$TMP/fm_log" >/dev/null || fail "fashion size"
  python3 - "$TMP/fm" <<'PY'
import json, os, sys, tarfile, struct, zlib
out = sys.argv[1]
meta = json.load(open(os.path.join(out, "meta.json")))
assert meta["classes"][0] == "T-shirt/top" and meta["classes"][9] == "Ankle boot", meta["classes"]
assert meta["image_size"] == [28, 28] and meta["channels"] == 1, meta
assert meta["splits"]["train"]["per_class"] == [6000] * 10, meta["splits"]["train"]
assert meta["splits"]["test"]["per_class"] == [1000] * 10, meta["splits"]["test"]
# Fashion-MNIST's training-set statistics (0.2860, 0.3530: numpy over the same pixels).
# The literals are rounded to 5 digits, hence the 1e-4.
assert abs(meta["mean"][0] - 0.28604) < 1e-4 and abs(meta["std"][0] - 0.35302) < 1e-4, meta["mean"]
with tarfile.open(os.path.join(out, "test-000000.tar")) as tf:
    names = tf.getnames()
    assert len(names) == 20000 and names[0] == "000000.png" and names[1] == "000000.cls", names[:4]
    png = tf.extractfile(names[0]).read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    w, h, depth, color = struct.unpack(">IIBB", png[16:26])
    assert (w, h, depth, color) == (28, 28, 8, 0), (w, h, depth, color)  # 8-bit grayscale
print("fashion-mnist: shards and meta.json check out")
PY
  echo "fashion-mnist prepare: $(echo "$end - $start" | bc 2>/dev/null || python3 -c "print($end - $start)") s"
  # --limit: the first N of each shuffled split.
  "$BIN" data prepare-images --idx-dir "$FM" --out "$TMP/fm_small" --limit 100 >"$TMP/fm_small_log"
  grep "train        100 images in 1 shard" "$TMP/fm_small_log" >/dev/null \
    || { cat "$TMP/fm_small_log"; fail "--limit"; }
else
  echo "fashion-mnist: $FM missing (Debian package dataset-fashion-mnist), its part skipped"
fi
echo PASS
