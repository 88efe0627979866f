"""What a callback gets besides the object: the :class:`Context`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, List, Optional

from wit_world.imports import events as _events
from wit_world.imports import capstan_operator_types as _wit

from .api import Api, call
from .log import Log, Span, log
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


@dataclass(frozen=True)
class FailedChild:
    """A child of the previous outcome for this object that the API server
    (or the host) refused, e.g. a 422 for an invalid spec or a 403 the host
    may not grant. The host has also recorded a Warning Event and set its
    ``Reconciled=False`` condition; a controller can react, e.g. with its
    own ``Ready=False`` condition naming the child."""

    api_version: str
    """The child's ``apiVersion``, e.g. ``batch/v1``."""
    kind: str
    """The child's kind, e.g. ``CronJob``."""
    namespace: Optional[str]
    """The child's namespace; ``None`` for a cluster-scoped child."""
    name: str
    """The child's name."""
    code: int
    """HTTP status code, e.g. 422 or 403."""
    reason: str
    """Machine-readable reason, e.g. ``Invalid`` or ``Forbidden``."""
    message: str
    """What the API server said."""
    cluster: Optional[str] = None
    """The member cluster of a fleet controller's child placed there with
    :meth:`Outcome.child_in <capstan_guest.Outcome.child_in>`; ``None`` for
    a child in the reconciled object's own cluster."""

    @staticmethod
    def _from_wit(failure: _wit.ChildFailure) -> "FailedChild":
        kind = failure.child.kind
        return FailedChild(
            api_version=f"{kind.group}/{kind.version}" if kind.group else kind.version,
            kind=kind.kind,
            namespace=failure.child.namespace,
            name=failure.child.name,
            code=failure.code,
            reason=failure.reason,
            message=failure.message,
            cluster=failure.cluster,
        )


class Context:
    """Handed to every callback: the event kind, the reconciled object's
    cluster, namespace and name, the children refused last time, the member
    clusters of a fleet controller, the Kubernetes client, events and
    logging."""

    def __init__(
        self,
        event: EventKind,
        namespace: Optional[str],
        name: str,
        failed_children: Iterable[FailedChild] = (),
        cluster: str = "default",
        members: Iterable[str] = (),
    ) -> None:
        """Made by the SDK for each call."""
        self.event: EventKind = event
        """Why this reconcile happens."""
        self.namespace: Optional[str] = namespace
        """Namespace of the reconciled object (``None`` if cluster-scoped)."""
        self.name: str = name
        """Name of the reconciled object."""
        self.failed_children: List[FailedChild] = list(failed_children)
        """Children of the previous outcome for this object that were
        refused and have not been applied since; empty when all were
        applied::

            for child in ctx.failed_children:
                ctx.log.warn("child refused", kind=child.kind, name=child.name, reason=child.reason)
        """
        self.cluster: str = cluster
        """The name of the cluster the object is in: ``default`` for the
        host's own cluster, else the name the host engaged it by
        (``capstan run --cluster NAME=...``, or a kubeconfig Secret's).
        :meth:`api` and :meth:`record` address this cluster; a controller
        run over a fleet tells the clusters apart by it::

            owner = f"{ctx.cluster}/{ctx.namespace}/{ctx.name}"
        """
        self.members: List[str] = list(members)
        """The member clusters of a fleet controller engaged now, in order
        (see :meth:`Manifest.fleet <capstan_guest.Manifest.fleet>`): where
        :meth:`Outcome.child_in <capstan_guest.Outcome.child_in>` may place
        children and :meth:`api_in` may read. Empty for a uniform
        controller::

            outcome = capstan.Outcome()
            for member in ctx.members:
                outcome.child_in(member, configmap)
        """
        self.log: Log = log
        """Structured logging under this reconcile's span."""

    def span(self, name: str, **attributes: Any) -> Span:
        """Opens a span of this reconcile (see :meth:`Log.span
        <capstan_guest.Log.span>`)::

            with ctx.span("compute-desired", replicas=3):
                ...
        """
        return self.log.span(name, **attributes)

    def __repr__(self) -> str:
        failed = f", failed_children={len(self.failed_children)}" if self.failed_children else ""
        cluster = f", cluster={self.cluster!r}" if self.cluster != "default" else ""
        members = f", members={self.members!r}" if self.members else ""
        return (
            f"Context(event={self.event.value}, namespace={self.namespace!r}, name={self.name!r}"
            f"{cluster}{members}{failed})"
        )

    def api(self, api_version: str, kind: str, namespace: Optional[str] = None) -> Api:
        """A client for ``kind`` in ``namespace`` (``None``: all namespaces
        for lists, or a cluster-scoped kind). Calls are checked against the
        controller's grants; reads of watched kinds come from the host's
        cache::

            cms = ctx.api("v1", "ConfigMap", ctx.namespace)
            settings = cms.get_opt("settings")
        """
        return Api(api_version, kind, namespace)

    def api_in(self, cluster: str, api_version: str, kind: str, namespace: Optional[str] = None) -> Api:
        """A client that reads ``kind`` in ``namespace`` of the cluster
        named ``cluster``: the request's own (:attr:`cluster`), or for a
        fleet controller its home or one of :attr:`members`; the host
        refuses any other with :class:`~capstan_guest.Denied`. ``get``,
        ``get_opt`` and ``list`` work as on :meth:`api` (the grants are
        the same); writes raise :class:`~capstan_guest.Denied` without
        calling the host: a fleet controller writes in its members through
        :meth:`Outcome.child_in <capstan_guest.Outcome.child_in>`::

            for member in ctx.members:
                copy = ctx.api_in(member, "v1", "ConfigMap", ctx.namespace).get_opt(f"{ctx.name}-greeting")
        """
        if not isinstance(cluster, str):
            raise TypeError(f"cluster must be a cluster name (str), not {type(cluster).__name__}")
        return Api(api_version, kind, namespace, cluster=cluster)

    def record(self, event: Event) -> None:
        """Records an Event right away (an :class:`~capstan_guest.Outcome`
        can carry events too, recorded after the outcome is applied).

        Raises an :class:`~capstan_guest.ApiError` when the host cannot
        record it."""
        call(_events.record, event._wit)
