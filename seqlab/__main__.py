"""``python -m seqlab …`` and ``torchrun --nproc_per_node=N -m seqlab train …``."""

from seqlab.cli.main import entry

if __name__ == "__main__":
    entry()
