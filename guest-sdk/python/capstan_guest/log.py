"""Structured logging through the host: lines are re-emitted as tracing
events under the span of the current reconcile. Keep messages constant and
put data in keyword fields::

    ctx.log.info("configmap applied", name="web", keys=3)
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from wit_world.imports import log as _wit


class Level(Enum):
    """Severity of a log line."""

    TRACE = "trace"
    """Very verbose diagnostics."""
    DEBUG = "debug"
    """Diagnostics."""
    INFO = "info"
    """Normal operation."""
    WARN = "warn"
    """Something unexpected that was handled."""
    ERROR = "error"
    """Something failed."""

    def _into_wit(self) -> _wit.Level:
        return _wit.Level[self.name]


class Log:
    """Logger handed out as :attr:`Context.log <capstan_guest.Context.log>`
    (and as :data:`capstan_guest.log`). Field values are rendered with
    ``str``."""

    def log(self, level: Level, message: str, **fields: Any) -> None:
        """Emits a line at ``level``."""
        _wit.log(level._into_wit(), message, [_wit.Field(key=k, value=str(v)) for k, v in fields.items()])

    def trace(self, message: str, **fields: Any) -> None:
        """Emits a trace line."""
        self.log(Level.TRACE, message, **fields)

    def debug(self, message: str, **fields: Any) -> None:
        """Emits a debug line."""
        self.log(Level.DEBUG, message, **fields)

    def info(self, message: str, **fields: Any) -> None:
        """Emits an info line."""
        self.log(Level.INFO, message, **fields)

    def warn(self, message: str, **fields: Any) -> None:
        """Emits a warning."""
        self.log(Level.WARN, message, **fields)

    def error(self, message: str, **fields: Any) -> None:
        """Emits an error line."""
        self.log(Level.ERROR, message, **fields)


log = Log()
"""The logger; the same object as ``ctx.log``."""
