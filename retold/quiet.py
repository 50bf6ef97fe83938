"""Silencing the progress bars and loading chatter of the model libraries.

sentence-transformers, transformers and huggingface_hub draw tqdm bars ("Loading weights",
"Batches") on stderr. In a terminal they interleave with the CLI's one-line results, and
in a Celery worker, which turns stderr into log records, every bar update becomes a
WARNING line. The edges (the CLI, the demo, each worker process) call
:func:`silence_progress_output` before anything loads a model; nothing calls it at import.
A variable the operator has set is left as it is, so ``HF_HUB_DISABLE_PROGRESS_BARS=0``
brings the bars back for debugging, and ``TRANSFORMERS_VERBOSITY=info`` the load reports.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

__all__ = ["QUIET_ENVIRONMENT", "silence_progress_output"]

QUIET_ENVIRONMENT: dict[str, str] = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # huggingface_hub's bars, and transformers' through it
    "TRANSFORMERS_VERBOSITY": "error",  # transformers' load reports and advisory warnings
}


def silence_progress_output(environ: MutableMapping[str, str] | None = None) -> None:
    """Set :data:`QUIET_ENVIRONMENT` in ``environ`` (the process environment by default)
    where unset, so this process and its children start quiet, and switch off the bars of
    the libraries this process has already imported, which read those variables only once.
    """
    env = os.environ if environ is None else environ
    for name, value in QUIET_ENVIRONMENT.items():
        env.setdefault(name, value)
    if env is not os.environ:
        return
    bars_off = _truthy(env["HF_HUB_DISABLE_PROGRESS_BARS"])
    hub = sys.modules.get("huggingface_hub.utils")
    if hub is not None and bars_off:
        hub.disable_progress_bars()
    transformers_logging = sys.modules.get("transformers.utils.logging")
    if transformers_logging is not None:
        if bars_off:
            transformers_logging.disable_progress_bar()
        if env["TRANSFORMERS_VERBOSITY"] == "error":
            transformers_logging.set_verbosity_error()


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")
