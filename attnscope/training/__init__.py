"""Training: Multi30k data, tokenizer training, the training loop, presets and sacreBLEU
evaluation. Knows nothing of the web."""
