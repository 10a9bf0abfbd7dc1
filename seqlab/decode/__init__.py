"""seqlab.decode: greedy, beam and sampling searches over one decoder-step contract.

A decoder implements ``step(y_prev (B,), state) -> (logits (B, V), state)`` (``StepDecoder``);
the model builds the initial state; every search returns a ``DecodeResult`` whose ``meta``
records the search settings and score formula. docs/decoding.md has the rules and examples.
"""

from seqlab.decode.beam import BeamConfig, beam_search, select_candidates
from seqlab.decode.greedy import GreedyConfig, greedy
from seqlab.decode.sampling import (
    SamplingConfig,
    sample,
    sampling_distribution,
    top_k_filter,
    top_p_filter,
)
from seqlab.decode.scoring import (
    best_possible_score,
    gnmt_coverage_penalty,
    gnmt_length_penalty,
    penalised_score,
    sequence_lengths,
    sequence_log_prob,
)
from seqlab.decode.state import DecodeResult, StepDecoder, reorder_state, repeat_rows

__all__ = [
    "BeamConfig",
    "DecodeResult",
    "GreedyConfig",
    "SamplingConfig",
    "StepDecoder",
    "beam_search",
    "best_possible_score",
    "gnmt_coverage_penalty",
    "gnmt_length_penalty",
    "greedy",
    "penalised_score",
    "reorder_state",
    "repeat_rows",
    "sample",
    "sampling_distribution",
    "select_candidates",
    "sequence_lengths",
    "sequence_log_prob",
    "top_k_filter",
    "top_p_filter",
]
