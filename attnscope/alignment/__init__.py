"""Word alignment: reference links from a statistical aligner (eflomal), symmetrisation,
subword-to-word mapping by character offsets, and scoring attention as an aligner."""
