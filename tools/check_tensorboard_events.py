#!/usr/bin/env python3
"""Print the scalars of TensorBoard event files with TensorBoard's own reader.

    python3 tools/check_tensorboard_events.py RUN_DIR [--expect TAG ...]

Loads every events.out.tfevents.* file under RUN_DIR with
tensorboard.backend.event_processing.event_accumulator.EventAccumulator and
prints one line per (tag, step, value). Exit status: 0 when the files load and
every --expect tag is present, 1 otherwise, 2 when the tensorboard package is
not installed (pip install tensorboard). A check of meshtrain's hand-written
event files against the reference reader; not needed to train.
"""
import argparse
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", help="directory holding events.out.tfevents.* files")
    ap.add_argument("--expect", nargs="*", default=[], help="tags that must be present")
    ap.add_argument("--quiet", action="store_true", help="print only the per-tag counts")
    args = ap.parse_args()
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        print("tensorboard is not installed (pip install tensorboard)", file=sys.stderr)
        return 2
    acc = event_accumulator.EventAccumulator(
        args.run_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = acc.Tags().get("scalars", [])
    if not tags:
        print(f"no scalars found in {args.run_dir}", file=sys.stderr)
        return 1
    for tag in sorted(tags):
        events = acc.Scalars(tag)
        print(f"{tag}: {len(events)} value(s)")
        if not args.quiet:
            for e in events:
                print(f"  step {e.step:>8}  {e.value:.9g}  (wall {e.wall_time:.3f})")
    missing = [t for t in args.expect if t not in tags]
    if missing:
        print("missing tags: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
