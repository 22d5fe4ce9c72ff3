"""`python -m meshtrain ARGS` (and the `meshtrain` script an installed wheel
puts on PATH) runs the meshtrain CLI with ARGS."""
import os
import sys

from meshtrain._cli import binary


def main():
    exe = binary()
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
