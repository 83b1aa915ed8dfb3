"""Each imported family against its original: logits, every attention matrix, greedy and beam
output, the tokenizer, switched-off heads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from builders import KINDS, language_id  # tests/hf (put on sys.path by its conftest)

from attnscope.decoding.beam import beam_search
from attnscope.decoding.greedy import greedy_decode
from attnscope.hf.checks import SAMPLES, generation_config
from attnscope.hf.vocab import Renumbering
from attnscope.nn.ablation import disabled_heads
from attnscope.nn.config import BOS_ID, PAD_ID, TransformerConfig
from attnscope.repository import LoadedModel, load_model_folder
from attnscope.testing import TINY_PAIRS

ATTENTIONS = (("encoder_self", "encoder_attentions"), ("decoder_self", "decoder_attentions"), ("cross", "cross_attentions"))


@pytest.fixture(scope="module", params=sorted(KINDS))
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def loaded(hf_models: Path, family: str) -> LoadedModel:
    return load_model_folder(hf_models / KINDS[family].model_id)


@pytest.fixture(scope="module")
def original(originals: dict[str, tuple[Any, Any]], family: str) -> tuple[Any, Any]:
    return originals[family]


@pytest.fixture(scope="module")
def numbering(original: tuple[Any, Any]) -> Renumbering:
    model, tokenizer = original
    c = model.config
    return Renumbering.of(
        pad=c.pad_token_id, unk=tokenizer.unk_token_id, eos=c.eos_token_id,
        start=c.decoder_start_token_id, vocab_size=c.vocab_size,
    )


def _forced(family: str, tokenizer: Any) -> int | None:
    """The original's id of the target language code (multilingual families), else None."""
    pair = KINDS[family].pair
    return None if pair is None else language_id(tokenizer, pair[1])


def _batch(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    return ids, torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])


def test_config_has_the_family_layout(loaded: LoadedModel, family: str) -> None:
    c = loaded.config
    assert isinstance(c, TransformerConfig)
    assert (c.d_model, c.heads) == (48, 3) and not c.standard_layout
    if family.startswith("t5"):  # T5: its pieces; the gated variant with heads of 20 (inner 60)
        assert (c.positions, c.norm, c.linear_bias, c.scale_attention, c.pre_norm) == ("relative", "rms", False, False, True)
        assert (c.encoder_layers, c.decoder_layers, c.relative_buckets, c.relative_max_distance) == (3, 2, 8, 16)
        gated = family == "t5gated"
        assert (c.gated_ff, c.activation, c.key_size) == ((True, "gelu_new", 20) if gated else (False, "relu", 16))
        return
    assert c.positions == "learned"
    layout = (c.encoder_layers, c.decoder_layers, c.pre_norm, c.has_final_norm, c.activation, c.embedding_norm)
    assert layout == {
        "marian": (3, 2, False, False, "silu", False),  # post-norm, no final norms, swish
        "m2m100": (2, 3, True, True, "relu", False),  # pre-norm with final norms, relu
        "nllb": (3, 2, True, True, "relu", False),  # M2M100's layers
        "mbart50": (2, 3, True, True, "gelu", True),  # pre-norm, embedding and final norms
    }[family]


def test_card_records_origin_and_checks(loaded: LoadedModel) -> None:
    card = loaded.card
    assert card["origin"]["family"] in ("Marian", "M2M100/NLLB", "mBART", "T5") and "license" in card
    for copy in ("float32", "saved"):
        checks = card["conversion_checks"][copy]
        assert checks["max_logit_difference"] < 1e-4 and checks["max_attention_difference"] < 1e-5
        assert checks["greedy_equal"] == checks["sentences"] == len(SAMPLES)


def test_tokenizer_gives_the_original_ids_and_text(loaded: LoadedModel, original: tuple[Any, Any], numbering: Renumbering) -> None:
    """The same ids (a multilingual source: the language code first); the same text, except
    that an unknown piece shows as "⁇" where the original drops it (attnscope never hides a
    lost span)."""
    _, hf_tok = original
    prefix = loaded.tokenizer.source_prefix_ids()
    for en, de in TINY_PAIRS + [("An unseen wörd: ∑ 🍕.", "x")]:
        for text in (en, de):
            theirs = hf_tok(text).input_ids
            assert prefix + loaded.tokenizer.encode(text) == numbering.from_hf(theirs[:-1])
            decoded = loaded.tokenizer.decode(numbering.from_hf(theirs))
            # the language code too is dropped (transformers 5 decodes M2M100's as text)
            assert decoded.replace("\u2047", "") == hf_tok.decode(theirs[len(prefix) :], skip_special_tokens=True)
    assert loaded.tokenizer.unk_spans("An unseen wörd: ∑ 🍕.") == ["ö", ":", "∑", "🍕"]


def test_teacher_forced_logits_and_every_attention_equal_the_original(
    loaded: LoadedModel, original: tuple[Any, Any], numbering: Renumbering
) -> None:
    """A padded batch of the tiny corpus, each target after the start token: logits to 1e-4,
    every encoder, decoder and cross attention matrix to 1e-5 (eager attention)."""
    hf_model, hf_tok = original
    pairs = TINY_PAIRS[:5]
    sources = [hf_tok(en).input_ids for en, _ in pairs]
    targets = [hf_tok(text_target=de).input_ids for _, de in pairs]
    start = hf_model.config.decoder_start_token_id
    src_hf, src_mask = _batch(sources, hf_model.config.pad_token_id)
    tgt_hf, _ = _batch([[start, *t[:-1]] for t in targets], hf_model.config.pad_token_id)
    src, _ = _batch([numbering.from_hf(s) for s in sources], PAD_ID)
    tgt, _ = _batch([[BOS_ID, *numbering.from_hf(t[:-1])] for t in targets], PAD_ID)
    with torch.no_grad():
        theirs = hf_model(input_ids=src_hf, attention_mask=src_mask, decoder_input_ids=tgt_hf, output_attentions=True)
        ours = loaded.model(src, tgt, need_weights=True)
    keep = [i for i in range(len(numbering.order)) if i not in numbering.copies]
    for b, (s_len, t_len) in enumerate(zip(map(len, sources), map(len, targets), strict=True)):
        mine = ours.logits[b, :t_len][:, keep]
        other = theirs.logits[b, :t_len].index_select(-1, numbering.to_hf[keep])
        torch.testing.assert_close(mine, other, rtol=0, atol=1e-4)
        keys = {"encoder_self": (s_len, s_len), "decoder_self": (t_len, t_len), "cross": (t_len, s_len)}
        for kind, hf_kind in ATTENTIONS:
            q, k = keys[kind]
            for layer, matrix in enumerate(getattr(theirs, hf_kind)):
                torch.testing.assert_close(getattr(ours, kind)[b, layer, :, :q, :k], matrix[b, :, :q, :k], rtol=0, atol=1e-5)


def _generate(hf_model: Any, source: list[int], **settings: Any) -> list[int]:
    generation_config(hf_model, **settings)
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([source]))[0, 1:].tolist()
    pad = hf_model.config.pad_token_id
    return [int(i) for i in out if i != pad]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_greedy_and_beam_equal_generate(
    loaded: LoadedModel, original: tuple[Any, Any], numbering: Renumbering, family: str, beam_size: int
) -> None:
    """A padded batch decoded together gives, sentence by sentence, the tokens of the
    original's ``generate`` with the same settings (beam: no length penalty, stop at k finished;
    a multilingual model's target code forced first, as ``forced_bos_token_id`` does)."""
    hf_model, hf_tok = original
    sources = [hf_tok(text).input_ids for text in SAMPLES]
    src, _ = _batch([numbering.from_hf(s) for s in sources], PAD_ID)
    limit = 12
    forced = _forced(family, hf_tok)
    prefix = None if forced is None else [numbering.from_hf([forced])] * len(sources)
    with torch.no_grad():
        if beam_size == 1:
            out = greedy_decode(loaded.model, src, need_weights=False, max_length=limit, prefix=prefix)
        else:
            out = beam_search(
                loaded.model, src, beam_size=beam_size, alpha=0.0, need_weights=False, max_length=limit, prefix=prefix
            )
    for b, source in enumerate(sources):
        expected = _generate(hf_model, source, num_beams=beam_size, max_new_tokens=limit, forced_bos_token_id=forced)
        assert out.tokens[b, : int(out.lengths[b])].tolist() == numbering.from_hf(expected)


def _output_projections(hf_model: Any) -> dict[tuple[str, int], Any]:
    """The original's output projections of encoder layer 0's self-attention, decoder layer 0's
    and decoder layer 1's cross-attention (T5's names or the BART lineage's)."""
    if hasattr(hf_model, "shared") and hasattr(hf_model, "encoder"):  # T5, mT5
        blocks = hf_model.encoder.block, hf_model.decoder.block
        return {
            ("encoder_self", 0): blocks[0][0].layer[0].SelfAttention.o,
            ("decoder_self", 0): blocks[1][0].layer[0].SelfAttention.o,
            ("cross", 1): blocks[1][1].layer[1].EncDecAttention.o,
        }
    return {
        ("encoder_self", 0): hf_model.model.encoder.layers[0].self_attn.out_proj,
        ("decoder_self", 0): hf_model.model.decoder.layers[0].self_attn.out_proj,
        ("cross", 1): hf_model.model.decoder.layers[1].encoder_attn.out_proj,
    }


def test_switched_off_head_equals_zeroed_output_projection(
    loaded: LoadedModel, original: tuple[Any, Any], numbering: Renumbering
) -> None:
    """Switching head h of an attention off is the original with that head's columns of the
    output projection zeroed; earlier layers' attention does not change, and the logits do."""
    hf_model, hf_tok = original
    source, target = hf_tok(SAMPLES[2]).input_ids, hf_tok(text_target=TINY_PAIRS[0][1]).input_ids
    src = torch.tensor([numbering.from_hf(source)])
    tgt = torch.tensor([[BOS_ID, *numbering.from_hf(target[:-1])]])
    tgt_hf = torch.tensor([[hf_model.config.decoder_start_token_id, *target[:-1]]])
    keep = [i for i in range(len(numbering.order)) if i not in numbering.copies]
    assert isinstance(loaded.config, TransformerConfig)
    dh = loaded.config.key_size
    modules = _output_projections(hf_model)
    with torch.no_grad():
        plain = loaded.model(src, tgt, need_weights=True)
        for (kind, layer), module in modules.items():
            with disabled_heads(loaded.model, [(kind, layer, 2)]):
                ours = loaded.model(src, tgt, need_weights=True)
            saved = module.weight.clone()
            module.weight[:, 2 * dh : 3 * dh] = 0.0
            theirs = hf_model(input_ids=torch.tensor([source]), decoder_input_ids=tgt_hf)
            module.weight.copy_(saved)
            other = theirs.logits[0].index_select(-1, numbering.to_hf[keep])
            torch.testing.assert_close(ours.logits[0][:, keep], other, rtol=0, atol=1e-4)
            assert not torch.allclose(ours.logits, plain.logits)
            assert ours.encoder_self is not None and plain.encoder_self is not None
            if kind == "encoder_self":
                torch.testing.assert_close(ours.encoder_self[:, : layer + 1], plain.encoder_self[:, : layer + 1])
                assert not torch.allclose(ours.encoder_self[:, layer + 1 :], plain.encoder_self[:, layer + 1 :])
            else:  # a decoder head: the encoder does not change
                torch.testing.assert_close(ours.encoder_self, plain.encoder_self)


def test_explanation_trace_gives_the_model_numbers(loaded: LoadedModel) -> None:
    """The explanations' own teacher-forced pass (attnscope.explain.trace: encoder positions, T5's
    bias, unscaled scores and RMS norms included) gives the model's logits and attention."""
    from attnscope.explain.trace import trace
    from attnscope.nn.config import EOS_ID
    from attnscope.nn.transformer import Transformer

    model = loaded.model
    assert isinstance(model, Transformer)
    tok = loaded.tokenizer
    source = tok.source_prefix_ids() + tok.encode(SAMPLES[2]) + [EOS_ID]
    target = tok.target_prefix_ids() + tok.encode(TINY_PAIRS[1][1]) + [EOS_ID]
    traced = trace(model, source, target)
    with torch.no_grad():
        out = model(torch.tensor([source]), torch.tensor([[BOS_ID, *target[:-1]]]), need_weights=True)
    torch.testing.assert_close(traced.logits, out.logits, rtol=0, atol=1e-4)
    assert out.encoder_self is not None and out.decoder_self is not None and out.cross is not None
    for kind, blocks in (("encoder_self", traced.encoder), ("decoder_self", traced.decoder_self), ("cross", traced.cross)):
        for layer, block in enumerate(blocks):
            torch.testing.assert_close(block.weights[0], getattr(out, kind)[0, layer], rtol=0, atol=1e-5)
