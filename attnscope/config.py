"""Settings for the server and the tools, read from ``ATTNSCOPE_*`` environment variables.

Every field can be set as ``ATTNSCOPE_<FIELD>`` (e.g. ``ATTNSCOPE_MODELS_DIR=/srv/models``,
``ATTNSCOPE_MAX_CHARS=2000``); command-line flags, where a command has them, win over the
environment. Empty variables count as unset.

Every ``ATTNSCOPE_*`` variable the code reads is a field here (tests/test_config.py checks that
nothing else in ``attnscope/`` reads one). Most are read once (:func:`get_settings`); the few switches
that a benchmark or a test flips while a process runs (``native``, ``cuda_graphs``, ``native_dir``,
``fashion_mnist_dir``) are read afresh with :func:`current`, parsed by the same field."""

from __future__ import annotations

import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
"""The checkout (``models/``, ``templates/``, ``static/``, ``runs/``); in an installed wheel, the
folder that holds the package (site-packages), where none of them is."""
IN_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file()
"""Whether the package runs from a checkout (an editable install or ``python -m``), not a wheel."""
SHIPPED = ("static", "templates", "models")
"""What a wheel carries beside the code, under ``attnscope/shipped/`` (setup.py copies them there)."""
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def shipped(name: str) -> Path:
    """The folder ``name`` (one of :data:`SHIPPED`): inside the package when installed from a
    wheel (``attnscope/shipped/<name>``), else the checkout's own ``<name>/``."""
    if name not in SHIPPED:
        raise ValueError(f"{name!r} is not shipped; one of {', '.join(SHIPPED)}")
    inside = PACKAGE_DIR / "shipped" / name
    return inside if inside.is_dir() else REPO_ROOT / name


def default_data_dir() -> Path:
    """Where the Multi30k corpus is read when neither ``--data-dir`` nor ``ATTNSCOPE_DATA_DIR``
    says: in a checkout, ``../shared/data/multi30k`` beside it when that folder exists (the
    development machines' and CI's shared copy); else, and always when installed from a wheel,
    ``~/.cache/attnscope/multi30k`` (where ``attnscope download`` puts it)."""
    shared = REPO_ROOT.parent / "shared" / "data" / "multi30k"
    if IN_CHECKOUT and shared.is_dir():
        return shared
    return Path.home() / ".cache" / "attnscope" / "multi30k"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTNSCOPE_", env_ignore_empty=True, extra="ignore")

    models_dir: Path = Field(
        default_factory=lambda: shipped("models"),
        description=(
            "The model repository: one folder per model, each loaded at start-up. Default: the "
            "shipped models (the checkout's models/, or the wheel's copy inside the package)."
        ),
    )
    added_models_dir: Path | None = Field(
        default=None,
        description=(
            "A second model repository served beside models_dir (`attnscope serve --models-dir DIR`; "
            "`--only-models-dir` serves DIR alone instead). A model id in both is an error."
        ),
    )
    analysis_dir: Path | None = Field(
        default=None,
        description=(
            "Head analyses (`attnscope analyze`'s heads.json) as <analysis_dir>/<model id>/heads.json; "
            "None: each model folder's analysis/heads.json."
        ),
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="The Multi30k data (training and evaluation); see default_data_dir().",
    )
    gold_dir: Path | None = Field(
        default=None,
        description=(
            "The RWTH German-English gold alignments (test.uc.de, test.uc.en, alignment.talp), a test set "
            "on the Test sets page; None: <data_dir>/../rwth-de-en (docs/testsets.md)."
        ),
    )
    testsets_dir: Path = Field(
        default_factory=lambda: Path(tempfile.gettempdir()) / "attnscope-testsets",
        description="Finished test-set jobs (Parquet, one folder each), reloaded after a restart (docs/testsets.md).",
    )
    testsets_ray: str | None = Field(
        default=None,
        description=(
            "Run test-set jobs on Ray: 'local' starts a local Ray, else the cluster at this address (auto, "
            "ray://...); None: in-process, unless the server itself runs on Ray (`serve --ray`), whose Ray they use."
        ),
    )
    fashion_mnist_dir: Path = Field(
        default=DEBIAN_FASHION_MNIST,
        description=(
            "Fashion-MNIST IDX files for the vision samples and training (default: Debian's "
            "dataset-fashion-mnist package); commands' --data-dir wins."
        ),
    )
    native: bool = Field(
        default=True,
        description=(
            "Use the native decoder operations built at install time (attnscope/nn/native) where they "
            "load; false (0/no/off): the Python step everywhere (same results, slower). Read afresh."
        ),
    )
    native_dir: Path | None = Field(
        default=None,
        description="Folder of the native libraries; None: <venv>/share/attnscope/native. Read afresh.",
    )
    cuda_graphs: bool = Field(
        default=True,
        description=(
            "Greedy and beam decoding on CUDA replay captured CUDA graphs (attnscope/decoding/static_greedy.py, "
            "static_beam.py; timed in docs/gpu.md); false (0): the eager steps. No effect on the CPU. Read afresh."
        ),
    )
    device: str | None = Field(
        default=None,
        description="Torch device for inference (cpu, cuda, cuda:1 ...); None picks cuda when available.",
    )
    quantize: Literal["int8"] | None = Field(
        default=None,
        description=(
            "int8: serve with int8 linear layers (FBGEMM's int8 products, activations quantised "
            "on the fly; the Transformers' encoder and decoder step run as native operations built "
            "at install time; CPU only; faster, slightly different outputs, see docs/findings.md). None: fp32."
        ),
    )
    host: str = Field(default="127.0.0.1", description="Address the server binds.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port the server listens on.")
    max_chars: int = Field(default=1000, ge=1, description="Longest accepted input text, in characters.")
    max_tokens: int = Field(default=200, ge=1, description="Longest accepted input text, in subword tokens.")
    max_batch: int = Field(default=32, ge=1, description="Most texts in one batch request.")
    torch_threads: int | None = Field(
        default=1,
        ge=1,
        description=(
            "Torch intra-op threads while serving. Requests already run in parallel worker threads, "
            "so 1 keeps them from oversubscribing the cores; None leaves torch's default."
        ),
    )
    switch_interval_ms: float = Field(
        default=1.0,
        gt=0,
        le=100,
        description=(
            "While serving, how long a thread may hold Python's interpreter lock before one waiting for it gets "
            "it (sys.setswitchinterval; Python's default is 5): the event loop waits for it after every "
            "socket call, so under big answers a health check waited 5 ms many times over."
        ),
    )
    keep_freed_mb: int = Field(
        default=256,
        ge=0,
        description=(
            "glibc only: freed memory (MB per malloc arena) the process keeps for reuse instead of "
            "returning it to the OS, so decoding steps do not page-fault their buffers in again "
            "(attnscope/allocator.py); 0 leaves malloc's defaults."
        ),
    )
    inference_threads: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Decodes that run at once (each in its own worker thread); about one per core.",
    )
    max_queue: int = Field(
        default=64,
        ge=0,
        description="Requests that may wait for a decode slot; more get 503 with Retry-After.",
    )
    batch_window_ms: float = Field(
        default=5.0,
        ge=0,
        le=1000,
        description=(
            "How long a request may wait for others with the same model and decoding settings, to "
            "be decoded with them as one batch (micro-batching); 0 turns it off."
        ),
    )
    max_batch_texts: int = Field(
        default=32, ge=1, description="Most texts one micro-batched decode takes (requests are never split)."
    )
    parallel_batch_texts: int = Field(
        default=16,
        ge=1,
        description=(
            "While a batch decodes, requests with the same model and settings wait for it, unless "
            "this many texts have gathered: then they decode beside it in a free slot (one batch "
            "per core; a smaller one would slow the first more than it gains)."
        ),
    )
    max_attention_floats: int = Field(
        default=32_000_000,
        ge=1,
        description=(
            "Admission budget per request: the attention weights its decode keeps (beams × output "
            "tokens × the model's attention floats per token). 32 M floats is 128 MB in float32."
        ),
    )
    max_decode_work: int = Field(
        default=512_000_000,
        ge=1,
        description=(
            "Admission budget of one decode (a request, or a micro-batch of them): the attention weights it "
            "computes, kept or not (beams × output tokens × the model's attention per token), so "
            '"attention": [] is cheaper but not free.'
        ),
    )
    max_answer_bytes: int = Field(
        default=64_000_000,
        ge=1,
        description=(
            "Admission budget of one decode's JSON answers (a request, or a micro-batch of them), estimated "
            "before decoding from the output budget, the attention kinds, precision and extras."
        ),
    )
    max_attribution_cost: int = Field(
        default=100_000,
        ge=1,
        description=(
            "Admission budget of one /api/attribution request: target tokens × (steps + 1) × "
            "(source + target tokens), the positions its backward passes (one per target token) go "
            "through. 100 k takes about 10-30 s on one CPU core."
        ),
    )
    max_route_floats: int = Field(
        default=128_000_000,
        ge=1,
        description=(
            "Admission budget of the memory one /api/attribution, /api/lens or /api/patch job holds at once, "
            "in floats (integrated gradients' rows of logits and activations, the lens's log-probabilities "
            "over the vocabulary; attnscope.engine.route_prices). 128 M floats is 512 MB in float32."
        ),
    )
    max_explain_cost: int = Field(
        default=2_000_000,
        ge=1,
        description=(
            "Admission budget of a request's `explain`: the token-layer passes its methods run "
            "(attnscope.engine.limits.explain_cost; value zeroing reruns every layer once per token)."
        ),
    )
    max_vision_cost: int = Field(
        default=6_000_000,
        ge=1,
        description=(
            "Admission budget of a vision request: the input image's pixels plus the canvas pixels its model "
            "reads (RAM: one canvas per glimpse; captioner: beams × caption steps). The default admits every "
            "image the schema allows (2048² and beam 10); lower it to refuse big images before they are decoded."
        ),
    )
    request_timeout_s: float = Field(
        default=60.0, gt=0, description="Deadline of a translate/align request, queueing included."
    )
    gzip_level: int = Field(
        default=1,
        ge=1,
        le=9,
        description=(
            "Level of gzipped API answers: 1-3 ISA-L's igzip, 4-9 zlib's. 1: a Transformer answer "
            "of ~140 KB in ~0.4 ms, ~13% larger than zlib's 5, which takes ten times as long "
            "(docs/api.md)."
        ),
    )
    max_body_bytes: int = Field(
        default=1_000_000, ge=1, description="Largest accepted request body; larger ones get 413."
    )
    attention_store_bytes: int = Field(
        default=256_000_000,
        ge=1,
        description=(
            'The attention store of `"attention": "on_demand"` answers, in bytes (recorded weights and '
            "explanations computed later); least recently used entries are evicted to make room, and a "
            "request whose attention could not fit even alone is refused before decoding (422)."
        ),
    )
    attention_store_seconds: float = Field(
        default=600.0,
        gt=0,
        description="An on-demand answer's attention is dropped once not read for this long (then 404: translate again).",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default=["localhost", "127.0.0.1", "::1"],
        description=(
            "Host header values the server answers (against DNS rebinding); '*' allows any, "
            "'*.example.org' a domain's subdomains. Set the names of a deployment, comma-separated "
            "in ATTNSCOPE_ALLOWED_HOSTS."
        ),
    )
    shutdown_timeout_s: float = Field(
        default=3.0, ge=0,
        description="On shutdown, how long running requests may take to finish (then decodes stop at their "
        "next step: with the default the server is gone within 5 s of SIGTERM or Ctrl+C).",
    )
    workers: int = Field(default=1, ge=1, le=64, description="Server processes (each loads every model).")
    client_header_timeout_s: float = Field(
        default=10.0, gt=0, le=300, description="A request's headers must arrive within this of its first byte (else 408)."
    )
    client_body_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="A request's body must arrive within this of its headers (else 408)."
    )
    client_send_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="A client that reads nothing of its answer for this long is disconnected (its buffer freed).",
    )
    stream_buffer_bytes: int = Field(
        default=4_000_000,
        ge=10_000,
        description="Encoded step events one stream may hold unsent; past it the decode waits for the client (issue 45.1).",
    )
    metrics_token: str | None = Field(
        default=None,
        description="If set, /metrics answers only requests with 'Authorization: Bearer <token>' (else 401).",
    )
    max_loaded_models: int | None = Field(
        default=None,
        ge=1,
        description=(
            "How many models stay loaded at once; the others are listed (config and card) and loaded "
            "on first use, the least recently used one unloaded beyond the bound. None: all, loaded at start-up."
        ),
    )
    max_loaded_bytes: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Bytes of weights (from each folder's safetensors header) that may be loaded at once, beside "
            "max_loaded_models: a load waits for room under both (the first always loads). None: no byte budget."
        ),
    )
    ray_min_replicas: int = Field(default=1, ge=1, description="serve --ray: fewest replicas (each loads the models).")
    ray_max_replicas: int = Field(
        default=1, ge=1, description="serve --ray: most replicas; above ray_min_replicas Serve autoscales between them."
    )
    ray_replica_cpus: float = Field(default=1.0, ge=0, description="serve --ray: CPUs Ray reserves per replica.")
    ray_replica_gpus: float = Field(
        default=0.0, ge=0, description="serve --ray: GPUs per replica (fractions share one GPU); >0 serves on cuda."
    )


    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        """``"a.example,b.example"`` (the environment's form) -> a list of names."""
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value


@lru_cache(maxsize=256)
def _parse(name: str, raw: str) -> Any:
    """``raw`` (stripped) as the field ``name`` parses it; empty: the field's default."""
    field = Settings.model_fields[name]
    if not raw:
        return field.get_default(call_default_factory=True)
    kind: Any = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    return TypeAdapter(kind).validate_python(raw)


def current(name: str) -> Any:
    """The setting ``name`` read afresh from ``ATTNSCOPE_<NAME>`` (parsed and validated as its
    :class:`Settings` field; unset or empty: the field's default), for the switches that may change
    while a process runs. Cheap (about a microsecond): each raw value is parsed once."""
    return _parse(name, os.environ.get(_ENV_NAMES.get(name) or _env_name(name), "").strip())


_ENV_NAMES: dict[str, str] = {}


def _env_name(name: str) -> str:
    _ENV_NAMES[name] = f"ATTNSCOPE_{name.upper()}"
    return _ENV_NAMES[name]


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read from the environment once."""
    return Settings()


def data_dir(flag: str | Path | None = None) -> Path:
    """The corpus folder a command uses: its ``--data-dir`` flag, else ``ATTNSCOPE_DATA_DIR``,
    else :func:`default_data_dir` (read afresh, not from the cached settings)."""
    return Path(flag) if flag else Settings().data_dir
