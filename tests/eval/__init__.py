"""Tests of seqlab.eval."""
