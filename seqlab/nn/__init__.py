"""seqlab.nn: the layers every model is assembled from (see docs/notation.md)."""
