"""seqlab.models: one registered model family per file, built from seqlab.nn layers."""
