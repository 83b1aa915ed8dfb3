"""Decoder-only LLM translators: the translation prompt (:mod:`attnscope.llm.prompt`), the model
folder (:mod:`attnscope.llm.folder`), decoding with a key/value cache (:mod:`attnscope.llm.search`)
and the answer's attention views shaped like an encoder-decoder's (:mod:`attnscope.llm.views`),
put together by :class:`attnscope.llm.translator.LLMTranslator`. See docs/llm.md."""
