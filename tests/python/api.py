"""The Python package as a notebook uses it (PYTHONPATH=build/python,
MESHTRAIN_BINARY=build/bin/meshtrain): load and validate configurations
(with the CLI's own errors), train the tiny preset on 2 ranks while reading
its step records as they arrive, read the run's metrics and memory report,
plan a layout, and run the CLI as `python -m meshtrain`.
"""
import os
import subprocess
import sys
import tempfile

import meshtrain


def main():
    with tempfile.TemporaryDirectory(prefix="meshtrain_py_") as tmp:
        check(tmp)


def check(tmp):
    exe = meshtrain.binary()
    subprocess.run([exe, "data", "synth", "--out", f"{tmp}/data", "--tokens", "60000"], check=True,
                   capture_output=True)
    overrides = {"model.preset": "tiny", "model.vocab_size": 256, "data.train": f"{tmp}/data/train_*.bin",
                 "train.steps": 600, "train.lr": 3e-3, "train.threads": 1, "telemetry.dir": f"{tmp}/run",
                 "checkpoint.every": 300, "checkpoint.resume": "never"}

    cfg = meshtrain.load_config(None, overrides)
    assert cfg["train"]["steps"] == 600 and cfg["telemetry"]["dir"] == f"{tmp}/run", cfg["train"]

    # A bad key: the same message the CLI prints.
    try:
        meshtrain.load_config(None, {"train.stepz": 3})
        raise AssertionError("an unknown key was accepted")
    except meshtrain.MeshtrainError as e:
        cli = subprocess.run([exe, "train", "--check", "--set", "train.stepz=3"], capture_output=True, text=True)
        assert cli.returncode != 0 and str(e) in cli.stderr, (str(e), cli.stderr)
        print("bad key:", e)
    try:
        meshtrain.train(None, dict(overrides, **{"parallel.tp": 3}), nproc=2)
        raise AssertionError("tp 3 on 2 ranks was accepted")
    except meshtrain.MeshtrainError as e:
        print("bad layout:", e)

    # Train on 2 ranks (600 tiny steps: a few seconds), reading records while
    # the run writes them.
    run = meshtrain.train(None, overrides, nproc=2)
    seen = []
    for rec in run.steps():
        if "loss" in rec and "step" in rec:
            seen.append((rec["step"], rec["loss"], run.running()))
    steps = [s for s, _, _ in seen]
    assert steps == list(range(1, 601)), steps[:5]
    assert any(alive for _, _, alive in seen), "no record was read before the run ended"
    assert seen[-1][1] < seen[0][1], seen
    records = meshtrain.read_metrics(run.run_dir)
    assert [r["step"] for r in records if "loss" in r] == steps
    memory = meshtrain.read_memory(run.run_dir)
    assert [m["rank"] for m in memory] == [0, 1] and "predicted" in memory[0], memory
    try:
        frame = meshtrain.read_metrics(run.run_dir, as_frame=True)
        assert len(frame) == len(records)
        print("pandas frame:", frame.shape)
    except ImportError:
        print("pandas not installed: the DataFrame form was not checked")

    # Model files out and in through the package.
    ckpts = meshtrain.inspect_checkpoints(f"{run.run_dir}/ckpt")
    assert ckpts and ckpts[-1].get("step") == 600, ckpts
    model = meshtrain.export_model(f"{run.run_dir}/ckpt", f"{tmp}/exported.safetensors", format="meshtrain")
    assert os.path.getsize(model) > 0
    imported = meshtrain.import_model(model, f"{tmp}/imported")
    assert meshtrain.inspect_checkpoints(imported), "the imported checkpoint is not readable"
    try:
        meshtrain.export_model(f"{tmp}/no_such_dir", f"{tmp}/x.safetensors")
        raise AssertionError("exporting a missing checkpoint succeeded")
    except meshtrain.MeshtrainError as e:
        print("missing checkpoint:", e)

    plans = meshtrain.plan("gpt2", "h100-sxm", 8, global_batch=64)
    layouts = plans.get("layouts") or plans.get("plans")
    assert layouts, plans.keys()
    print("plan: first layout", {k: layouts[0][k] for k in list(layouts[0])[:6]})

    version = subprocess.run([sys.executable, "-m", "meshtrain", "--version"], capture_output=True, text=True,
                             env=dict(os.environ))
    assert version.returncode == 0 and "meshtrain" in version.stdout, version
    live = sum(alive for _, _, alive in seen)
    print(f"python api: {len(steps)} steps ({live} of them while the run went on) read from a 2-rank run; config, errors, telemetry, model files, plan and "
          f"`python -m meshtrain` work")


if __name__ == "__main__":
    main()
