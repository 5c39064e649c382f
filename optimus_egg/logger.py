"""The package's one logger, ``optimus_egg``, and the ``OPTIMUS_EGG_DEBUG`` switch.

A library should not print: by default the logger has only a ``NullHandler``, so a fallback
reaches the user once, as its ``OptimizerFallback`` warning, and an application that configures
logging sees it once more as one WARNING record of this logger. ``OPTIMUS_EGG_DEBUG=1`` logs each
graph's statistics at DEBUG level: through the application's handlers when it has any, else on
stderr.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("optimus_egg")
log.addHandler(logging.NullHandler())


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (test runners swap it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:  # StreamHandler's constructor assigns one
        pass


_stderr: _Stderr | None = None


def debug_enabled() -> bool:
    return os.environ.get("OPTIMUS_EGG_DEBUG", "") not in ("", "0")


def _has_handlers() -> bool:
    """Whether a record of this logger reaches a handler that outputs something."""
    logger: logging.Logger | None = log
    while logger is not None:
        if any(not isinstance(h, logging.NullHandler) for h in logger.handlers):
            return True
        logger = logger.parent if logger.propagate else None
    return False


def log_debug(msg: str, *args: object) -> None:
    """A DEBUG record when ``OPTIMUS_EGG_DEBUG`` is set, shown even where logging isn't configured."""
    global _stderr
    if not debug_enabled():
        return
    if log.getEffectiveLevel() > logging.DEBUG:
        log.setLevel(logging.DEBUG)
    if _stderr is None and not _has_handlers():
        _stderr = _Stderr()
        log.addHandler(_stderr)
    log.debug(msg, *args)
