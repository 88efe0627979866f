"""Structured logging through the host: lines are re-emitted as tracing
events under the span of the current reconcile. Keep messages constant and
put data in keyword fields::

    ctx.log.info("configmap applied", name="web", keys=3)

Spans of your own, in the reconcile's trace (the log lines and API calls
made inside one land in it)::

    with ctx.log.span("render", template="index") as span:
        ...
        span.fail("the template does not parse")  # or raise: the span records it
"""

from __future__ import annotations

from enum import Enum
from types import TracebackType
from typing import Any, Optional, Type

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

    def span(self, name: str, **attributes: Any) -> "Span":
        """Opens a span named ``name`` inside the innermost span still open
        (else the host's span of this call), with ``attributes`` rendered
        with ``str``; use it as a context manager, or call
        :meth:`Span.end`. The host bounds what it keeps (names of up to 64
        characters of ``[A-Za-z0-9_.:/-]``, 16 attributes, 128 spans per
        call, 16 open at once); past that it opens nothing and the span
        records nothing (:attr:`Span.recording`)."""
        fields = [_wit.Field(key=k, value=str(v)) for k, v in attributes.items()]
        return Span(_wit.start_span(name, fields))


class Span:
    """A span opened with :meth:`Log.span`. Ending it ends every span opened
    inside it that is still open; one still open when the callback returns
    ends with it."""

    def __init__(self, id: int) -> None:
        self._id = id
        self._error: Optional[str] = None

    @property
    def recording(self) -> bool:
        """Whether the host opened the span (false past its limits)."""
        return self._id != 0

    def fail(self, message: str) -> None:
        """Marks the span failed with ``message``; it ends later."""
        self._error = message

    def end(self) -> None:
        """Ends the span (again: nothing)."""
        if self._id != 0:
            _wit.end_span(self._id, self._error)
            self._id = 0

    def __enter__(self) -> "Span":
        return self

    def __exit__(
        self,
        kind: Optional[Type[BaseException]],
        error: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        if error is not None and self._error is None:
            self._error = f"{type(error).__name__}: {error}"
        self.end()


log = Log()
"""The logger; the same object as ``ctx.log``."""
