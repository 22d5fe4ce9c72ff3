"""meshtrain from Python: configurations, training runs, telemetry, the planner.

    import meshtrain
    cfg = meshtrain.load_config("configs/char4l_fortunes.json", {"train.steps": 50})
    run = meshtrain.train("configs/char4l_fortunes.json", {"train.steps": 50}, nproc=2)
    for record in run.steps():
        print(record["step"], record["loss"])
    meshtrain.read_metrics(run.run_dir, as_frame=True)      # pandas
    meshtrain.plan("gpt2", "h100-sxm", 8)                    # ranked layouts
    meshtrain.export_model(run.run_dir + "/ckpt", "gpt2.safetensors")  # for transformers

`import meshtrain.torch` registers the "meshtrain" torch.distributed backend
(docs/TORCH.md). `python -m meshtrain ...` is the CLI. docs/PYTHON.md.
"""
from meshtrain._cli import MeshtrainError, binary
from meshtrain.config import load_config
from meshtrain.models import export_model, import_model, inspect_checkpoints
from meshtrain.planner import plan
from meshtrain.run import Run, train
from meshtrain.telemetry import read_memory, read_metrics

__all__ = ["MeshtrainError", "Run", "binary", "export_model", "import_model", "inspect_checkpoints", "load_config",
           "plan", "read_memory", "read_metrics", "train"]
