"""What a callback gets besides the object: the :class:`Context`."""

from __future__ import annotations

from enum import Enum
from typing import Optional

from wit_world.imports import events as _events
from wit_world.imports import types as _wit

from .api import Api, call
from .log import Log, log
from .outcome import Event


class EventKind(Enum):
    """Why the host called: derived from state by comparing the object with
    what this controller last handled successfully."""

    ADDED = "added"
    """Not handled before (or not since the host started)."""
    MODIFIED = "modified"
    """Changed since last handled."""
    DELETED = "deleted"
    """Being deleted."""
    RESYNC = "resync"
    """Unchanged: periodic resync, requeue, a child or watched object
    changed, or a new component version took over."""

    @staticmethod
    def _from_wit(event: _wit.EventKind) -> "EventKind":
        return EventKind[event.name]


class Context:
    """Handed to every callback: the event kind, the reconciled object's
    namespace and name, the Kubernetes client, events and logging."""

    def __init__(self, event: EventKind, namespace: Optional[str], name: str) -> None:
        """Made by the SDK for each call."""
        self.event: EventKind = event
        """Why this reconcile happens."""
        self.namespace: Optional[str] = namespace
        """Namespace of the reconciled object (``None`` if cluster-scoped)."""
        self.name: str = name
        """Name of the reconciled object."""
        self.log: Log = log
        """Structured logging under this reconcile's span."""

    def __repr__(self) -> str:
        return f"Context(event={self.event.value}, namespace={self.namespace!r}, name={self.name!r})"

    def api(self, api_version: str, kind: str, namespace: Optional[str] = None) -> Api:
        """A client for ``kind`` in ``namespace`` (``None``: all namespaces
        for lists, or a cluster-scoped kind). Calls are checked against the
        controller's grants; reads of watched kinds come from the host's
        cache::

            cms = ctx.api("v1", "ConfigMap", ctx.namespace)
            settings = cms.get_opt("settings")
        """
        return Api(api_version, kind, namespace)

    def record(self, event: Event) -> None:
        """Records an Event right away (an :class:`~capstan_guest.Outcome`
        can carry events too, recorded after the outcome is applied).

        Raises an :class:`~capstan_guest.ApiError` when the host cannot
        record it."""
        call(_events.record, event._wit)
