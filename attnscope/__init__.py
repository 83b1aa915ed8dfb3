"""attnscope: translate with RNN and Transformer NMT models and look inside their attention."""

__version__ = "0.1.0"
