"""The axes of a result's attention kinds, shared by the result objects and their tables."""

from __future__ import annotations

# Per attention kind: the token lists of its query and key axes, and its layer axis's name.
KIND_AXES: dict[str, tuple[str, str, str]] = {
    "cross": ("target_tokens", "source_tokens", "layer"),
    "encoder_self": ("source_tokens", "source_tokens", "encoder_layer"),
    "decoder_self": ("target_tokens", "decoder_input_tokens", "layer"),
}
