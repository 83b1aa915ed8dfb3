"""attnscope: translate with RNN and Transformer NMT models and look inside their attention.

``attnscope.load(name_or_folder)`` runs a model in this process, ``attnscope.Client(url)`` talks to
a server; both are imported on first use, so ``import attnscope`` stays light (docs/python.md)."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "load": "attnscope.api.local",
    "Client": "attnscope.api.client",
    "Result": "attnscope.api.results",
    "AttributionResult": "attnscope.api.results",
    "APIError": "attnscope.api.errors",
    "InvalidRequest": "attnscope.api.errors",
    "ModelNotFound": "attnscope.api.errors",
    "ServerBusy": "attnscope.api.errors",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    """The Python API's names, imported when first asked for (PEP 562)."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attnscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
