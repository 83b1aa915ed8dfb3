"""Neural networks: attention score functions, RNN, self-attentive RNN and Transformer models.

Nothing here knows about training or the web. Every model returns attention in one format,
``[batch, layers, heads, query, key]``, and never stores it on a module.
"""

from attnscope.nn.config import ModelConfig
from attnscope.nn.factory import build_model
from attnscope.nn.outputs import EncoderOutput, Seq2SeqOutput, StepOutput

__all__ = ["ModelConfig", "build_model", "EncoderOutput", "Seq2SeqOutput", "StepOutput"]
