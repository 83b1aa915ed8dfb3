"""Head analysis over whole corpora (``attnscope analyze``): per-sentence statistics of every
attention head (:mod:`.statistics`), per-head summaries and roles (:mod:`.roles`), the corpus and
its batches (:mod:`.corpus`), the in-process run (:mod:`.runner`) and the same run on Ray Data
(:mod:`.distributed`). See docs/analysis.md."""
