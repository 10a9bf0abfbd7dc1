"""seqlab: the classic neural sequence models of the lecture notes, on PyTorch."""

__version__ = "0.1.0"
