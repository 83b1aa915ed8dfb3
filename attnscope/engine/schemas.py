"""Request and response bodies of the JSON API (pydantic), with the examples shown at ``/docs``.

Requests are strict: unknown fields, wrong JSON types (``"5"`` for a number) and text that is
empty, whitespace only or not valid Unicode are rejected with 422 naming the field. Limits that
come from the settings (characters, tokens, batch size) are checked by the service."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    create_model,
    field_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from attnscope.engine.head_scores import CardAblation, CardAlignment
from attnscope.engine.heads import (
    ALIGNMENT_DESCRIPTION,
    DISABLE_DESCRIPTION,
    MAX_DISABLED_HEADS,
    AlignmentChoice,
    HeadRef,
    WordAlignment,
)
from attnscope.explain import registry as explain_registry

AttentionKind = Literal["cross", "encoder_self", "decoder_self"]
Matrix = list[list[list[list[float]]]]  # [layer][head][query][key]

MAX_BEAM = 16
MAX_DECODE_LENGTH = 512  # a model with a shorter positional range caps it further


def check_unicode(value: str) -> str:
    """Reject lone surrogates (JSON's "\\ud800" escapes): they cannot be encoded as UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise PydanticCustomError(
            "invalid_unicode", "is not valid Unicode: lone surrogate at position {pos}", {"pos": err.start}
        ) from None
    return value


def check_text(value: str) -> str:
    """Reject text with nothing but whitespace, or that is not valid Unicode."""
    if not value.strip():
        raise PydanticCustomError("empty_text", "must not be empty or whitespace only")
    return check_unicode(value)


Text = Annotated[str, AfterValidator(check_text)]
Target = Annotated[str, AfterValidator(check_unicode)]
ModelId = Annotated[str, Field(min_length=1, max_length=200, description="A model id from /api/models.")]
BeamSize = Annotated[
    int, Field(ge=1, le=MAX_BEAM, description="Beam width; 1 is greedy decoding.")
]
MaxLength = Annotated[
    int | None,
    Field(
        ge=1,
        le=MAX_DECODE_LENGTH,
        description="Most output tokens (EOS included). Default: 1.5 × source tokens + 10.",
    ),
]

MAX_COVERAGE_PENALTY = 5.0
CoveragePenalty = Annotated[
    float | None,
    Field(
        ge=0.0,
        le=MAX_COVERAGE_PENALTY,
        allow_inf_nan=False,  # NaN was refused as "less than or equal to 5", which misleads
        description=(
            "GNMT's coverage penalty beta (Wu et al. 2016): beam search ranks hypotheses by their "
            "length-normalised log-probability plus beta × Σ_source log(min(attention received, 1)), "
            "from the last layer's cross-attention averaged over heads, so outputs that leave source "
            "words unattended rank lower. 0 turns it off; default: the model's own "
            "(decoding.coverage_penalty in /api/models, tuned on validation data). No effect with "
            "beam_size 1; a model without cross-attention accepts only 0."
        ),
    ),
]
Kinds = Annotated[
    list[AttentionKind] | Literal["on_demand"] | None,
    Field(
        description=(
            "The attention kinds to return (those the model lacks are left out); [] returns none and "
            "decodes without recording attention (cheapest). Default: every kind the model has. "
            '"on_demand": no matrices in the answer but an `attention_id` and each kind\'s shape; every kind '
            "is kept on the server for GET /api/attention/{attention_id}/{kind}/{layer}/{head}."
        ),
    ),
]
Precision = Annotated[
    int, Field(ge=0, le=8, description="Decimals of the attention weights (default 6; 3 roughly halves the JSON).")
]

_EXAMPLE_MODEL = "en-de-transformer"


ScoreMatrix = list[list[list[list[float | None]]]]  # [layer][head][query][key], null where masked
MAX_ALTERNATIVES = 20

ReturnBeam = Annotated[
    bool, Field(description="Add `beam`: every node beam search kept, the chosen path and the finished hypotheses.")
]
Prefix = Annotated[
    # The length bound on the str alone, where pydantic checks it natively: on ``str | None``
    # beside a validator it sometimes ran as a Python check on null too (a TypeError, a 500)
    Annotated[str, Field(max_length=2000)] | None,
    AfterValidator(lambda v: None if v is None else check_unicode(v)),
    Field(
        description=(
            "Force the translation to begin with this target text (tokenised like a target), then decode on: "
            "a what-if. `forced_tokens` in the answer says how many tokens were forced."
        ),
    ),
]
LanguageCode = Annotated[
    Annotated[str, Field(min_length=1, max_length=40)] | None,
    Field(
        description=(
            "A multilingual imported model's (M2M100, NLLB, mBART) language code for this request, e.g. 'de' "
            "(M2M100), 'deu_Latn' (NLLB), 'de_DE' (mBART); default: the model card's pair. An unknown code, or "
            "one given to a model without language codes, is a 422 listing the valid codes."
        )
    ),
]
Protect = Annotated[
    bool | None,
    Field(
        description=(
            "Copy numbers, emoji, links, names the model does not know and words the vocabulary can only spell "
            "byte by byte through placeholders: the model translates the text with each replaced (a number by "
            "'two', a name or link by 'Obama', emoji removed), each is put back where its cross-attention places "
            "it (placeholder words never stay in the output), and the result is scored on your text, so "
            "`attention` is the model's while reading the output shown; a text of nothing else is copied "
            "through. `protected` says where each went. Default (null): the model's `protect` (on for every "
            "model with cross-attention), off with `prefix`; with `return_beam`, on only when the text has such "
            "a span, and then `beam` is null. `true` is a 422 with `prefix` or `return_beam`; models without "
            "cross-attention translate as usual."
        )
    ),
]
ReturnScores = Annotated[
    bool,
    Field(description="Add `attention_scores` (before the softmax), `context_norms`, `context_vectors`, `key_dim` and `score_scale`."),
]
Alternatives = Annotated[
    int,
    Field(ge=0, le=MAX_ALTERNATIVES, description="Add `alternatives`: the model's top-k tokens at each target position (0: none)."),
]


def check_explain_method(name: str) -> str:
    """A registered explanation method's name (422 naming the known ones)."""
    try:
        return explain_registry.method(name).name
    except ValueError as err:
        raise PydanticCustomError("explain_method", str(err)) from None


def check_explain(asked: list[str]) -> list[str]:
    """At most as many names as there are methods."""
    if len(asked) > len(explain_registry.names()):
        raise PydanticCustomError("too_long", "asks for more methods than there are ({count})", {"count": len(explain_registry.names())})
    return asked


def _explain_enum(schema: dict[str, Any]) -> None:
    """The OpenAPI document lists the methods registered when it is drawn."""
    schema["items"]["enum"] = list(explain_registry.names())
    schema["maxItems"] = len(explain_registry.names())


ExplainMethods = Annotated[
    list[Annotated[str, AfterValidator(check_explain_method)]],
    AfterValidator(check_explain),
    Field(
        json_schema_extra=_explain_enum,
        description=(
            "Add `explanations`, computed by one teacher-forced pass over the returned (or given) target: "
            "each a registered explanation method (`GET /api/explain-methods` lists them with their papers, "
            "e.g. `norm`, `rollout`, `value_zeroing`, `alti`). See docs/api.md for each definition and its cost."
        ),
    ),
]


class StrictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _integral_numbers(cls, data: Any) -> Any:
        """``3.0`` where an integer is wanted is 3: JSON has one number type, and the schema's
        ``integer`` includes it (issue 45.8; float fields take ints as they are, and ``"3"`` or
        ``3.5`` are still refused)."""
        return _integral(data)


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


class AnswerFields(StrictRequest):
    """What comes back: the attention kinds and how many decimals (requests that return answers)."""

    attention: Kinds = None
    precision: Precision = 6


class SamplingRequest(StrictRequest):
    """Draw the translation instead of searching it (``attnscope.decoding.sampling``)."""

    temperature: float = Field(default=1.0, ge=0.0, le=10.0, allow_inf_nan=False,
                               description="Divides the log-probabilities; 0 is greedy decoding.")  # fmt: skip
    top_k: int = Field(default=0, ge=0, description="Draw among the k most likely tokens only; 0: every token.")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, allow_inf_nan=False,
                         description="Draw among the most likely tokens whose mass reaches p; 1: every token.")  # fmt: skip
    seed: int = Field(ge=0, le=2**31 - 1, description="Same seed, same model, text and device: same translation.")


SAMPLING_DESCRIPTION = (
    "Sample each token (temperature, then top-k, then top-p) with a per-sentence generator seeded by `seed`, "
    "instead of beam or greedy search. Needs beam_size 1 (the default when sampling) and no return_beam."
)


# The request fields that several bodies share, each defined once
Alignment = Annotated[AlignmentChoice | None, Field(description=ALIGNMENT_DESCRIPTION)]
DisabledHeads = Annotated[
    list[HeadRef], Field(max_length=MAX_DISABLED_HEADS, description=DISABLE_DESCRIPTION)
]
Sampling = Annotated[SamplingRequest | None, Field(description=SAMPLING_DESCRIPTION)]


def _one_output(body: Any) -> Any:
    """A sampled request decodes one output: beam_size 1 unless given (then it must be 1)."""
    if body.sampling is None:
        return body
    if "beam_size" in body.model_fields_set and body.beam_size != 1:
        raise ValueError("sampling draws one output: use beam_size 1")
    if getattr(body, "return_beam", False):
        raise ValueError("sampling has no beam tree: leave return_beam out")
    body.beam_size = 1
    return body


class TranslateRequest(AnswerFields):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": _EXAMPLE_MODEL, "text": "A man is riding a bicycle.", "beam_size": 5},
                {"model": _EXAMPLE_MODEL, "text": "Two dogs play in the snow.", "beam_size": 1, "max_length": 30},
                {"model": _EXAMPLE_MODEL, "text": "A dog runs while a man reads.", "beam_size": 5, "coverage_penalty": 0.2},
                {
                    "model": _EXAMPLE_MODEL,
                    "text": "A man is riding a bicycle.",
                    "alignment": {"kind": "cross", "layer": 1, "head": 1},
                    "disable_heads": [{"kind": "cross", "layer": 0, "head": 0}],
                },
                {"model": _EXAMPLE_MODEL, "text": "A dog runs.", "attention": ["cross"], "precision": 3},
            ]
        }
    )

    model: ModelId
    text: Text = Field(description="Source text (limits: see the server's max_chars and max_tokens).")
    beam_size: BeamSize = 5
    max_length: MaxLength = None
    coverage_penalty: CoveragePenalty = None
    return_beam: ReturnBeam = False
    prefix: Prefix = None
    protect: Protect = None
    source_lang: LanguageCode = None
    target_lang: LanguageCode = None
    return_scores: ReturnScores = False
    alternatives: Alternatives = 0
    explain: ExplainMethods = []
    alignment: Alignment = None
    disable_heads: DisabledHeads = []
    sampling: Sampling = None

    @model_validator(mode="after")
    def _sampled(self) -> Any:
        return _one_output(self)


class BatchTranslateRequest(AnswerFields):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": _EXAMPLE_MODEL,
                    "texts": ["A man is riding a bicycle.", "Two dogs play in the snow."],
                    "beam_size": 5,
                }
            ]
        }
    )

    model: ModelId
    texts: list[Text] = Field(min_length=1, description="Source texts, decoded as one batch (at most max_batch).")
    beam_size: BeamSize = 5
    max_length: MaxLength = None
    coverage_penalty: CoveragePenalty = None
    protect: Protect = None
    source_lang: LanguageCode = None
    target_lang: LanguageCode = None
    alignment: Alignment = None
    disable_heads: DisabledHeads = []
    sampling: Sampling = None

    @model_validator(mode="after")
    def _sampled(self) -> Any:
        return _one_output(self)


class AlignRequest(AnswerFields):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": _EXAMPLE_MODEL, "text": "A man is riding a bicycle.", "target": "Ein Mann fährt Fahrrad."}
            ]
        }
    )

    model: ModelId
    text: Text = Field(description="Source text.")
    target: Target = Field(
        description="Your translation; the model is teacher-forced on it (may be empty: then only </s> is scored)."
    )
    return_scores: ReturnScores = False
    alternatives: Alternatives = 0
    explain: ExplainMethods = []
    alignment: Alignment = None
    disable_heads: DisabledHeads = []


class Word(BaseModel):
    text: str = Field(
        description=(
            "The word: its pieces joined, without SentencePiece's ▁ marker; byte pieces shown as the "
            "characters they spell, <unk> as the source text behind it (or ⁇ in a target)."
        )
    )
    tokens: list[int] = Field(description="Indices into the token list that make up this word.")


class BeamNode(BaseModel):
    id: int
    parent: int | None = Field(description="The node this one extends; null for the root (the start token <s>).")
    step: int = Field(description="Position in the output: 0 for the root, t for the t-th token.")
    token: str = Field(description="The piece this node adds.")
    token_id: int
    logprob: float = Field(description="Log-probability of this token given the path before it.")
    score: float = Field(description="Cumulative log-probability of the path up to here.")
    finished: bool = Field(description="True where a hypothesis ended (with </s>, or at the length limit).")


class BeamHypothesis(BaseModel):
    node: int = Field(description="Its last node.")
    translation: str
    tokens: list[str]
    score: float = Field(description="Cumulative log-probability.")
    ranking: float = Field(description="What beam search ranked by: the length-normalised score (plus any coverage penalty).")


class BeamTree(BaseModel):
    nodes: list[BeamNode] = Field(description="Every hypothesis prefix beam search kept; candidates never kept are not nodes.")
    best: list[int] = Field(description="Node ids of the returned hypothesis, root first: their tokens after the root are target_tokens.")
    hypotheses: list[BeamHypothesis] = Field(description="Every finished hypothesis, best first.")


class Alternative(BaseModel):
    token: str
    token_id: int
    logprob: float


class ProtectedSpan(BaseModel):
    """A span of the source copied through a placeholder (``protect``)."""

    text: str
    kind: Literal["number", "emoji", "word"]
    placed: Literal["replaced", "beside", "start", "end", "copied"] = Field(
        description=(
            "replaced: it took the place of the output word that translated its placeholder; beside: the model "
            "dropped the placeholder, so it went next to the output word attending most to it; start/end: an "
            "emoji that began or ended the source (or a span whose placeholder could not be found in the "
            "source's words: appended at the end); copied: the text was nothing but such spans, so the output "
            "is the text itself."
        )
    )
    source_start: int = Field(description="Character offset in the source text.")
    source_end: int
    target_start: int = Field(description="Character offset in `translation`.")
    target_end: int


def _explanation_fields() -> dict[str, Any]:
    """One optional field per answer field of each registered method (registry order)."""
    fields: dict[str, Any] = {}
    for m in explain_registry.methods().values():
        for f in m.fields:
            fields[f.name] = (Annotated[Any, WithJsonSchema(dict(f.schema))] | None, Field(default=None, description=f.description))
    return fields


# What `explain` asked for, one key per answer field of each method registered when the server
# starts (a method registered later still answers: extra keys are allowed).
if TYPE_CHECKING:

    class Explanations(BaseModel):
        unavailable: dict[str, str]

else:
    Explanations = create_model(
        "Explanations",
        __config__=ConfigDict(extra="allow"),
        __doc__=(
            "What `explain` asked for, each method's fields (null when not asked); the methods a model has no "
            "definition for are in `unavailable`."
        ),
        **_explanation_fields(),
        unavailable=(
            dict[str, str],
            Field(default_factory=dict, description="Each method asked for that this model's family has no definition for, and why."),
        ),
    )


class AttentionShape(BaseModel):
    """The size of one attention kind kept on demand: [layers][heads][rows][columns]."""

    layers: int
    heads: int
    rows: int = Field(description="Queries: the tokens that attend (target tokens, or source for encoder_self).")
    columns: int = Field(description="Keys: the tokens attended to.")


class MissingWord(BaseModel):
    """A source word that should come back as written (a number, a protected span, a capitalised
    word inside the sentence: a name) and is not in the output (attnscope.text.missing)."""

    text: str
    source_start: int = Field(description="Character offset in the source text.")
    source_end: int
    protected: bool = Field(description="True for a span copied through a placeholder (`protect`).")


class Confidence(BaseModel):
    """The low-confidence / out-of-domain flag (attnscope.confidence): the mean log-probability per
    output token against a threshold calibrated on in-domain sentences (Multi30k val)."""

    mean_logprob: float = Field(description="Mean of target_logprobs (end-of-sentence token included).")
    threshold: float | None = Field(description="Below this the output is flagged: the 5 % quantile of in-domain outputs (null: not calibrated).")
    low: bool = Field(description="True when mean_logprob < threshold: the input is probably unlike the training data.")
    calibrated: bool = Field(description="True when the model's card has a calibration (bench/confidence.py --write); false: never flagged.")
    explanation: str | None = Field(description="One line saying why, when low (else null).")


class TranslationResponse(BaseModel):
    """One translated (or aligned) sentence and every attention matrix of the model."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "en-de-rnn-additive",
                    "translation": "Hallo",
                    "source_tokens": ["▁Hello", "</s>"],
                    "target_tokens": ["▁Hallo", "</s>"],
                    "decoder_input_tokens": ["<s>", "▁Hallo"],
                    "eos_token": "</s>",
                    "finished": True,
                    "source_words": [{"text": "Hello", "tokens": [0]}, {"text": "</s>", "tokens": [1]}],
                    "target_words": [{"text": "Hallo", "tokens": [0]}, {"text": "</s>", "tokens": [1]}],
                    "attention": {"cross": [[[[0.93, 0.07], [0.4, 0.6]]]]},
                    "score": "additive",
                    "logprob": -0.31,
                    "target_logprobs": [-0.2, -0.11],
                    "timing_ms": 12.5,
                }
            ]
        }
    )

    model: str
    translation: str = Field(description="The output text (for /api/align: the given target).")
    source_tokens: list[str] = Field(description="Source pieces; the last is eos_token.")
    target_tokens: list[str] = Field(
        description="Output pieces; ends with eos_token when the model produced it (see finished)."
    )
    decoder_input_tokens: list[str] = Field(
        description="The decoder's inputs, ['<s>'] + target_tokens[:-1]: the keys of decoder_self."
    )
    eos_token: str = Field(description="The end-of-sentence piece included in the token lists.")
    finished: bool = Field(description="True when the output ends with eos_token; false when cut off by max_length.")
    source_words: list[Word] = Field(description="Source token indices grouped into words (eos is its own word).")
    target_words: list[Word] = Field(description="Target token indices grouped into words.")
    attention: dict[AttentionKind, Matrix] = Field(
        description=(
            "Each attention kind the model has, as [layer][head][query][key] (rounded to 6 decimals; "
            "each row sums to 1). cross: target_tokens × source_tokens; encoder_self: source_tokens × "
            "source_tokens; decoder_self: target_tokens (queries) × decoder_input_tokens (keys). "
            "RNN models have 1 layer × 1 head; a model without attention returns {}."
        )
    )
    score: str | None = Field(description="The alignment score function (RNN models), or null for the Transformer.")
    logprob: float = Field(description="Log-probability of the whole output under the model.")
    target_logprobs: list[float] = Field(description="Log-probability of each target token.")
    timing_ms: float = Field(description="Server-side time for tokenising, decoding and building this answer.")
    attention_cost: dict[AttentionKind, int] = Field(
        default_factory=dict,
        description=(
            "How many attention weights each kind computed: layers × heads × queries × keys (m·t for "
            "cross-attention; the decoder's masked upper triangle included). {} without attention."
        ),
    )
    forced_tokens: int = Field(
        default=0, description="How many leading target tokens were forced by `prefix` rather than chosen (0 without)."
    )
    beam: BeamTree | None = Field(default=None, description="The beam search tree (only with return_beam).")
    attention_scores: dict[AttentionKind, ScoreMatrix] | None = Field(
        default=None,
        description=(
            "Only with return_scores: the raw alignment scores before the softmax, in the shape of "
            "`attention`; softmax over a row gives the attention row. Masked keys are null. RNN "
            "cross-attention: the model's score function of the previous decoder state and each "
            "source state (additive vᵀtanh(W_s s + W_h h), dot, scaled dot, general, query–key, "
            "concat, cosine, location); Transformer: q·k/√d_k per head."
        ),
    )
    context_norms: list[list[list[float]]] | None = Field(
        default=None,
        description="Only with return_scores: [layer][head][query] the norm of each cross-attention context vector cₜ = Σᵢ αₜᵢ vᵢ.",
    )
    context_vectors: list[list[list[list[float]]]] | None = Field(
        default=None,
        description="Only with return_scores: [layer][head][query][dim] the cross-attention context vectors themselves (per head for the Transformer).",
    )
    key_dim: int | None = Field(
        default=None,
        description="Only with return_scores: d_k, the size of the vectors a score compares (the Transformer divides q·k by √d_k).",
    )
    score_scale: float | None = Field(
        default=None,
        exclude_if=lambda value: value is None,  # absent unless set: older answers keep their bytes
        description=(
            "Only with return_scores, for a model whose scores are q·k (absent otherwise, and for the RNNs): "
            "the number a head's q·k is divided by to give its raw score: √d_k for the Transformers that scale "
            "(the shipped ones), 1.0 for those that do not (imported T5/mT5, whose self-attention scores add "
            "a relative position bias to q·k)."
        ),
    )
    alternatives: list[list[Alternative]] | None = Field(
        default=None,
        description="Only with alternatives > 0: per target position, the model's most likely tokens there (given the tokens before), best first.",
    )
    word_alignment: WordAlignment | None = Field(
        default=None, description="The hard word alignment asked for with `alignment` (else null)."
    )
    disabled_heads: list[HeadRef] = Field(default=[], description="The heads that were switched off (disable_heads).")
    protected: list[ProtectedSpan] | None = Field(
        default=None, description="With `protect`: the spans copied through placeholders (else null)."
    )
    explanations: Explanations | None = Field(
        default=None, description="With `explain`: each method's explanation of this answer (else null)."
    )
    attention_id: str | None = Field(
        default=None,
        exclude_if=lambda value: value is None,  # absent unless on demand: other answers keep their bytes
        description=(
            'Only with "attention": "on_demand": the id of this answer\'s attention, kept on the server '
            "(GET /api/attention/{attention_id}/...) until evicted; it names the server process that holds it."
        ),
    )
    attention_shapes: dict[AttentionKind, AttentionShape] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description='Only with "attention": "on_demand": each kind\'s layers, heads, rows (queries) and columns (keys).',
    )
    rescored: bool = Field(
        default=False,
        description=(
            "True when the output shown is not the search's own: with `protect`, the model translated the text "
            "with placeholders, the spans were put back, and the restored text was scored teacher-forced, so "
            "`logprob`, `target_logprobs` and `attention` are the model's reading of that text."
        ),
    )
    missing_words: list[MissingWord] = Field(
        default=[],
        description=(
            "Source words that should come back as written (numbers, protected spans, capitalised words inside "
            "the sentence) and are not in the output as written: a dropped name or number, or a word translated."
        ),
    )
    confidence: Confidence | None = Field(
        default=None, description="The low-confidence / out-of-domain flag from the model's own probabilities."
    )
    llm: dict[str, Any] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,  # absent for encoder-decoders: their answers keep their bytes
        description=(
            "Decoder-only models only (docs/llm.md): what exactly ran, `prompt`, `prompt_tokens`, `prompt_token_ids`, "
            "`source_span` ([start, end) in prompt tokens: source_tokens), `target_token_ids`, `first_target_row` "
            "(the causal matrix's row of the first output token) and `outside_source` [layer][head][target] (each "
            "output row's attention mass off the source: instruction, attention sink, own output)."
        ),
    )

    @field_serializer("attention")
    def _attention_lists(self, attention: dict[AttentionKind, Any]) -> dict[AttentionKind, Matrix]:
        """The server's answers hold each matrix as a float64 array (``attnscope.engine.answers``
        writes those into the JSON itself); anywhere pydantic serialises one, as nested lists."""
        return {kind: m.tolist() if isinstance(m, np.ndarray) else m for kind, m in attention.items()}


class ModelInfo(BaseModel):
    id: str
    architecture: str = Field(description="rnn, self_attentive_rnn or transformer.")
    score: str | None = Field(description="The alignment score function, or null for the Transformer.")
    source_lang: str
    target_lang: str
    layers: int = Field(description="Decoder layers in the attention matrices (1 for RNN models).")
    encoder_layers: int = Field(description="Encoder layers in encoder_self (1 for RNN models).")
    heads: int = Field(description="Heads per layer (1 for RNN models).")
    parameters: int
    attention: list[AttentionKind] = Field(description="The attention kinds the model returns.")
    bleu: dict[str, Any] | float | None = Field(
        description=(
            "BLEU from the model's card, as the card has it: per test split "
            '({"test2016": {"cased": 35.1, "lowercase_13a": 36.4, ...}, ...}), a number, or null.'
        )
    )
    chrf: dict[str, Any] | None = Field(
        default=None,
        description=(
            "chrF from the model's card (sacreBLEU's CHRF, cased), per test split: "
            '{"test2016": {"score": 61.2, "signature": "nrefs:1|case:mixed|..."}, ...}, or null.'
        ),
    )
    device: str
    card: dict[str, Any] = Field(description="The scalar fields of the model's card.json.")
    max_source_tokens: int = Field(
        description="Longest accepted text in subword tokens (the server's limit, or fewer where the model's positions end)."
    )
    max_length: int | None = Field(
        description="Most output tokens the model has positions for (EOS included); null when unbounded."
    )
    warnings: list[str] = Field(
        default_factory=list, description="Problems that did not stop the model, e.g. a card.json that could not be read."
    )
    decoding: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "The beam-search defaults this model is decoded with: length_penalty (GNMT's alpha) and "
            "coverage_penalty (GNMT's beta), from its card (tuned on validation data) or the defaults 0.6 and 0."
        ),
    )
    protect: bool = Field(
        default=False,
        description="Whether translate requests that do not set `protect` go through placeholders for this model.",
    )
    alignment: CardAlignment | None = Field(
        default=None,
        description="From the card (`attnscope evaluate --alignment`): each cross-attention head's word-alignment "
        "F1, AER, precision and recall as [layer][head] grids, with the baselines; null when not measured.",
    )
    ablation: CardAblation | None = Field(
        default=None,
        description="From the card (`attnscope evaluate --ablate`): test BLEU with each head switched off, per "
        "attention kind as [layer][head] grids; null when not measured.",
    )
    state: Literal["loaded", "loading", "not_loaded"] = Field(
        default="loaded",
        description="loaded; or, when at most ATTNSCOPE_MAX_LOADED_MODELS stay loaded, loading or not_loaded "
        "(a request for it loads it first, or answers 503 'model X is loading' with Retry-After).",
    )


class UnavailableModel(BaseModel):
    id: str = Field(description="The model folder's name.")
    file: str | None = Field(description="The file at fault: config.json, model.safetensors or tokenizer.model.")
    reason: str = Field(description="Why the folder could not be loaded.")


class ModelsResponse(BaseModel):
    models: list[ModelInfo]
    unavailable: list[UnavailableModel] = Field(
        default_factory=list, description="Model folders that failed to load, with the reason; they cannot be used."
    )


class HealthResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "ok", "device": "cpu", "models": 4}]})

    status: Literal["ok"]
    device: str = Field(description="Where inference runs: cpu or cuda:N.")
    models: int = Field(description="How many models are loaded.")


class ReadyResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"status": "ready", "models": 7, "unavailable": 0, "loaded": 7, "total": 7}]}
    )

    status: Literal["ready", "loading", "stopping", "no_models"]
    detail: str | None = Field(default=None, description="With no_models: why nothing can be served.")
    models: int = Field(description="How many models are loaded.")
    unavailable: int = Field(description="How many model folders failed to load.")
    loaded: int = Field(description="How many model folders are done: loaded or failed (models + unavailable).")
    total: int = Field(description="How many model folders there are; loaded == total once ready.")


class FieldError(BaseModel):
    field: str = Field(description="The offending field, e.g. text or texts[2].")
    loc: list[str | int]
    msg: str
    type: str


class ErrorResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"detail": "text: must not be empty or whitespace only"}]}
    )

    detail: str = Field(description="A readable message naming the problem.")
    errors: list[FieldError] | None = Field(default=None, description="422 only: every invalid field.")
    available: list[str] | None = Field(default=None, description="404 for a model: the ids there are.")
