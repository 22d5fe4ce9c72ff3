"""Helpers shared by the PyTorch peers in tools/peers/ (imported as a sibling
module: a script's own directory is on sys.path when it runs)."""
import time


def add_shape_options(ap, choices, preset, batch, seq_help=None):
    """Adds a peer's --preset (one of `choices`), --batch, --seq (0: the preset's
    context) and --threads (default 1) to the ArgumentParser `ap`."""
    ap.add_argument("--preset", default=preset, choices=choices)
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--seq", type=int, default=0, help=seq_help)
    ap.add_argument("--threads", type=int, default=1)


def time_steps(step, warmup, steps, log=print, before=None, note=""):
    """Runs step() (it returns the loss) warmup + steps times and logs each step's
    loss and wall time, `note` after each (e.g. " (rank 0)"); before(), when given,
    runs untimed ahead of every step (e.g. a barrier). Returns the wall and the
    CPU seconds of this process for each timed step, and the last loss."""
    times, cpu_times, loss = [], [], float("nan")
    for i in range(warmup + steps):
        if before is not None:
            before()
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
            cpu_times.append(time.process_time() - c0)
        log(f"step {i + 1:4d}{' (warmup)' if i < warmup else ''}: "
            f"loss {loss:.4f}{note}, {dt * 1e3:.1f} ms{note}")
    return times, cpu_times, loss
