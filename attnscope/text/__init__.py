"""Text: the SentencePiece tokenizer and subword -> word grouping."""

from attnscope.text.tokenizer import EOS_PIECE, Tokenizer, group_words

__all__ = ["EOS_PIECE", "Tokenizer", "group_words"]
