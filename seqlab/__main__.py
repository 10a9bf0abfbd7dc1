"""``python -m seqlab …`` and ``torchrun --nproc_per_node=N -m seqlab train …``."""

import sys

from seqlab.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
