"""The one boundary to the optional engines (the extras of ``pyproject.toml``).

Every optional import goes through :func:`require`, which raises one error type,
:class:`MissingExtra`, naming the extra to install (``pip install 'attnscope[ray]'``); Ray is
joined or started in one place, :func:`join_ray`. Library code never exits: the command line
(:func:`attnscope.cli.main`) turns an :class:`OptionalEngineError` into one line on stderr and
exit status 2.

======================  ==========  ==============================================
module                  extra       needed by
======================  ==========  ==============================================
``transformers``        ``hf``      ``attnscope import`` (never to serve)
``pyarrow.parquet``     ``analysis`` ``attnscope analyze`` (its Parquet files)
``ray``, ``ray.data``   ``ray``     ``analyze --ray``, ``evaluate --ablate --ray``
``ray.serve``           ``ray``     ``serve --ray``
``eflomal``             ``align``   ``attnscope align-corpus``
``pandas``, ``xarray``  ``notebook`` a result's ``to_pandas()``, ``to_xarray()``
``anywidget``           ``notebook`` ``result.show()`` (kaleido, for ``save()``: its own message)
======================  ==========  ==============================================
"""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from types import ModuleType

logger = logging.getLogger(__name__)


class OptionalEngineError(RuntimeError):
    """An optional engine cannot be used (not installed, or its cluster out of reach); the
    message is one line a user can act on."""


class MissingExtra(OptionalEngineError, ImportError):
    """``module`` is not installed; ``hint`` is the pip command that installs its ``extra``. Also
    an ImportError, as Python's own error for a missing module is (``except ImportError`` holds)."""

    def __init__(self, module: str, extra: str, purpose: str | None = None, cause: BaseException | None = None) -> None:
        self.module, self.extra = module, extra
        self.hint = f"pip install 'attnscope[{extra}]'"
        package = module.split(".")[0]
        what = f"{purpose} needs {package}" if purpose else f"{package} is not installed"
        why = f" ({cause})" if cause is not None else ""
        super().__init__(f"{what}{why}: {self.hint}")


class ClusterUnavailable(OptionalEngineError):
    """The Ray cluster at an address cannot be joined."""


def require(module: str, extra: str, *, purpose: str | None = None) -> ModuleType:
    """The module ``module`` (dotted: ``"ray.data"``, ``"pyarrow.parquet"``), imported, or
    :class:`MissingExtra` naming ``extra``; ``purpose`` says what needs it (``"--ray"``)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtra(module, extra, purpose, err) from err


def _auth_hint() -> str:
    """What to set when the refusal may be Ray's token authentication (docs/ray.md, "Joining a
    cluster"): Ray 2.60's ``ray start --head`` turns it on where a token exists
    (``~/.ray/auth_token``, which any local ``ray.init()`` writes), but a process joining at an
    explicit address sends its token only under ``RAY_AUTH_MODE=token``; the GCS then answers
    ``InvalidAuthToken`` and the join fails after ~20 s as "Failed to connect"."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        return " (RAY_AUTH_MODE=token is set: is the token the cluster's? RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
    return (" (if the cluster uses token authentication, as `ray start --head` does where ~/.ray/auth_token exists, "
            "set RAY_AUTH_MODE=token, with its token in ~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH)")  # fmt: skip


def join_ray(address: str | None, *, cpus: int, log_to_driver: bool = True, purpose: str | None = None) -> bool:
    """Join the Ray cluster at ``address`` (``auto``, ``ray://head:10001``), or, when it is
    empty, start a local Ray with ``cpus`` CPUs whose workers import this checkout's
    ``attnscope`` (an editable install may point elsewhere). True if this call started or
    joined Ray (the caller shuts it down), False if Ray was already up in this process.
    :class:`ClusterUnavailable` when the cluster cannot be joined."""
    ray = require("ray", "ray", purpose=purpose)
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no phoning home
    quiet = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": log_to_driver}
    if address:
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as err:  # one clear line, not Ray's traceback
            raise ClusterUnavailable(f"cannot join the Ray cluster at {address}: {err}{_auth_hint()}") from None
        return True
    root = str(Path(__file__).resolve().parents[1])
    ray.init(address="local", num_cpus=cpus, runtime_env={"env_vars": {"PYTHONPATH": root}}, **quiet)
    return True
