"""seqlab.nn: the layers every model is assembled from.

Each layer's docstring holds its paper, equation, shapes and deviations; see
``docs/layers.md`` for what proves each one and ``docs/notation.md`` for symbol ↔ name.
"""

from seqlab.nn.attention import (
    AdditiveScore,
    Attention,
    ConcatScore,
    DotScore,
    GeneralScore,
    ScaledDotScore,
    make_score,
)
from seqlab.nn.cells import GRUCell, LSTMCell, RNNCell
from seqlab.nn.conv import Conv1d, Conv2d, conv_output_size, pool1d, pool2d
from seqlab.nn.embedding import Embedding, tied_logits
from seqlab.nn.glu import GLU, ConvGLUBlock
from seqlab.nn.masks import attention_mask, causal_mask, masked_softmax, padding_mask
from seqlab.nn.multihead import KVCache, MultiHeadAttention
from seqlab.nn.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from seqlab.nn.recurrent import Recurrent
from seqlab.nn.residual import BasicBlock, ResidualMLPBlock
from seqlab.nn.transformer import FeedForward, TransformerEncoder, TransformerEncoderLayer
from seqlab.nn.transformer_decoder import (
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerDecoderState,
)

__all__ = [
    "GLU",
    "AdditiveScore",
    "Attention",
    "BasicBlock",
    "ConcatScore",
    "Conv1d",
    "Conv2d",
    "ConvGLUBlock",
    "DotScore",
    "Embedding",
    "FeedForward",
    "GRUCell",
    "GeneralScore",
    "KVCache",
    "LSTMCell",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "RNNCell",
    "Recurrent",
    "ResidualMLPBlock",
    "ScaledDotScore",
    "SinusoidalPositionalEncoding",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerDecoderState",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "attention_mask",
    "causal_mask",
    "conv_output_size",
    "make_score",
    "masked_softmax",
    "padding_mask",
    "pool1d",
    "pool2d",
    "tied_logits",
]
