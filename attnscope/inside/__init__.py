"""Inside the layers: the logit lens, direct logit attribution and activation patching of Transformer translation models (no web imports)."""
