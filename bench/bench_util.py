"""Helpers shared by the interleaved benchmark scripts in bench/."""
import platform


def cpu_model():
    """The CPU's model name as /proc/cpuinfo gives it, for the tables' captions."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
