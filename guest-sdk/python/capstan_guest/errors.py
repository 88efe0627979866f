"""Errors: from the Kubernetes API (:class:`ApiError` and its subclasses)
and from a reconcile (:class:`Transient`, :class:`Terminal`).

API calls raise a subclass of :class:`ApiError`; catch the ones you expect::

    try:
        cm = ctx.api("v1", "ConfigMap", ctx.namespace).get("settings")
    except capstan.NotFound:
        cm = None

An :class:`ApiError` that escapes ``reconcile`` becomes a transient error
(retried with backoff), except :class:`Denied`, which no retry can fix and
becomes terminal, as in the Rust SDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Self

from . import _json

if TYPE_CHECKING:
    from .outcome import Event


@dataclass(frozen=True)
class ApiStatus:
    """What the API server said about a failed call."""

    code: int
    """HTTP status code, e.g. 404."""
    reason: str
    """Machine-readable reason, e.g. ``NotFound``."""
    message: str
    """Human-readable message."""


class ApiError(Exception):
    """A failed call to the Kubernetes API through the host.

    ``status`` is set for errors the API server answered (``NotFound``,
    ``AlreadyExists``, ``Conflict``, ``Invalid``, ``Forbidden``, ``Other``)
    and ``None`` for the others.
    """

    prefix = "api error"

    def __init__(self, message: str, status: Optional[ApiStatus] = None) -> None:
        super().__init__(f"{self.prefix}: {message}")
        self.message: str = message
        """The host's or API server's message."""
        self.status: Optional[ApiStatus] = status
        """The API server's answer, if there was one."""

    @property
    def is_not_found(self) -> bool:
        """True for 404."""
        return isinstance(self, NotFound)

    @property
    def is_conflict(self) -> bool:
        """True for 409 (already exists or conflict)."""
        return isinstance(self, (Conflict, AlreadyExists))


class Denied(ApiError):
    """The controller's grants do not allow the call; nothing was sent.
    Declare the permission in the :class:`~capstan_guest.Manifest`."""

    prefix = "denied by grants"


class NotFound(ApiError):
    """404: the object or kind does not exist."""

    prefix = "not found"


class AlreadyExists(ApiError):
    """409: create of a name that exists."""

    prefix = "already exists"


class Conflict(ApiError):
    """409: stale resourceVersion or apply conflict."""

    prefix = "conflict"


class Invalid(ApiError):
    """422: the object failed validation."""

    prefix = "invalid"


class Forbidden(ApiError):
    """403 from the API server."""

    prefix = "forbidden"


class BadRequest(ApiError):
    """The request was malformed before it was sent."""

    prefix = "bad request"


class Unavailable(ApiError):
    """The API server could not be reached."""

    prefix = "api server unavailable"


class OtherApiError(ApiError):
    """Any other API error."""

    def __init__(self, message: str, status: Optional[ApiStatus] = None) -> None:
        super().__init__(message, status)
        code = status.code if status else 0
        Exception.__init__(self, f"api error {code}: {message}")


class Decode(ApiError):
    """The host answered with JSON that could not be decoded."""

    prefix = "cannot decode the host's answer"


class ReconcileError(Exception):
    """Why a reconcile gave up: raise :class:`Transient` or :class:`Terminal`.

    Either may carry the ``status`` to write (the status field only, as in
    :meth:`Outcome.status <capstan_guest.Outcome.status>`; any JSON-able
    value) and ``events`` to record. The host keeps the children as they
    are, writes the status (merged with its own ``Reconciled=False``
    condition for a terminal failure) and records the events::

        raise capstan.Terminal(
            "spec.schedule is not a cron expression",
            status={"conditions": capstan.set_condition(conditions, "Ready", "False", "InvalidSpec", "bad schedule")},
            events=[capstan.Event.warning("InvalidSpec", "Validate")],
        )
    """

    def __init__(self, message: str, *, status: Any = None, events: Iterable["Event"] = ()) -> None:
        super().__init__(message)
        self.message: str = message
        """What went wrong."""
        self.status: Any = None
        """The status to write with the failure; ``None`` leaves it."""
        self.events: List["Event"] = []
        """Events to record with the failure."""
        self._status_json: Optional[bytes] = None
        if status is not None:
            self.with_status(status)
        for event in events:
            self.with_event(event)

    def with_status(self, status: Any) -> Self:
        """Sets the status to write with the failure (encoded to JSON right
        away: a value JSON cannot represent raises ``TypeError`` here).
        Returns the error, so calls chain."""
        self._status_json = _json.dumps(status)
        self.status = status
        return self

    def with_event(self, event: "Event") -> Self:
        """Adds an event to record with the failure. Returns the error."""
        if not hasattr(event, "_wit"):
            raise TypeError(f"expected a capstan_guest.Event, got {type(event).__name__}")
        self.events.append(event)
        return self

    @property
    def is_terminal(self) -> bool:
        """True if the host waits for the object to change."""
        return isinstance(self, Terminal)


class Transient(ReconcileError):
    """A failure worth retrying: the host retries with exponential backoff."""

    def __str__(self) -> str:
        return f"transient: {self.message}"


class Terminal(ReconcileError):
    """A failure retrying will not fix (e.g. an invalid spec): the host
    records a Warning event with this message and waits for the object to
    change."""

    def __str__(self) -> str:
        return f"terminal: {self.message}"


def from_api_error(error: ApiError) -> ReconcileError:
    """The reconcile error an escaped API error stands for: terminal for a
    denial by grants, transient otherwise."""
    if isinstance(error, Denied):
        return Terminal(str(error))
    return Transient(str(error))
