"""The engine's Prometheus metrics (``prometheus-client``): queue, running decodes, batches,
refusals and cancellations. One set per process, in the library's default registry, so the web
layer's ``/metrics`` (``attnscope.serving.metrics``) serves them with its own."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

QUEUE_DEPTH = Gauge("attnscope_queue_depth", "Requests waiting for a decode slot.", multiprocess_mode="livesum")
RUNNING = Gauge("attnscope_decodes_running", "Decodes running now (one per busy slot).", multiprocess_mode="livesum")
BATCH_TEXTS = Histogram(
    "attnscope_batch_texts",
    "Texts decoded together in one decode (micro-batches of concurrent requests).",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
)
BATCH_REQUESTS = Histogram(
    "attnscope_batch_requests", "Requests served by one decode.", buckets=(1, 2, 4, 8, 16, 32, 64)
)
REJECTED = Counter(
    "attnscope_rejections",
    "Requests refused before decoding: over the cost budget (422), queue full (503), body too large (413), bad Host (400).",
    ["reason"],
)
CANCELLED = Counter(
    "attnscope_decodes_cancelled",
    "Requests whose decode was given up: the client disconnected, or the deadline passed.",
    ["reason"],
)
