"""What a reconcile returns: the :class:`Outcome` builder, and
:class:`Event` objects.

Example::

    Outcome()
        .child(configmap)
        .status({"ready": True})
        .event(Event.normal("Reconciled", "Reconcile"))
        .requeue_after(60)

An outcome lists every child there should be: children of owned kinds it
does not list are deleted (pruned), unless it says
:meth:`Outcome.keep_children`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Mapping, Optional, Union

from wit_world.imports import capstan_operator_types as _wit

from ._json import dumps as _json
from .kinds import object_ref


class Event:
    """A Kubernetes Event to record, made with :meth:`normal` or
    :meth:`warning`::

        Event.normal("Created", "Reconcile").note("configmap web created")
    """

    def __init__(self, warning: bool, reason: str, action: str, note: Optional[str] = None) -> None:
        """Prefer :meth:`normal` and :meth:`warning`."""
        self._wit = _wit.Event(
            event_type=_wit.EventType.WARNING if warning else _wit.EventType.NORMAL,
            reason=reason,
            action=action,
            note=note,
            regarding=None,
        )

    @staticmethod
    def normal(reason: str, action: str, note: Optional[str] = None) -> "Event":
        """A Normal event: something expected happened. ``reason`` is short
        UpperCamelCase (``Created``), ``action`` what was done
        (``Reconcile``)."""
        return Event(False, reason, action, note)

    @staticmethod
    def warning(reason: str, action: str, note: Optional[str] = None) -> "Event":
        """A Warning event: something went wrong or needs attention."""
        return Event(True, reason, action, note)

    def note(self, note: str) -> "Event":
        """Human-readable detail."""
        self._wit.note = note
        return self

    def regarding(self, api_version: str, kind: str, namespace: Optional[str], name: str) -> "Event":
        """The object the event is about, when it is not the one being
        reconciled."""
        self._wit.regarding = object_ref(api_version, kind, namespace, name)
        return self


class Outcome:
    """What a successful reconcile asks the host to do. Every method
    returns the outcome, so calls chain."""

    def __init__(self) -> None:
        """Nothing to do."""
        self._wit = _wit.Outcome(
            children=[],
            status=None,
            events=[],
            requeue_after_ms=None,
            children_policy=_wit.ChildrenPolicy.PRUNE,
            member_children=[],
        )

    def child(self, child: Mapping[str, Any]) -> "Outcome":
        """A desired child object (with ``apiVersion`` and ``kind``). The
        host applies it by server-side apply, sets a controller
        ownerReference to the reconciled object, defaults its namespace to
        the owner's, and deletes children of owned kinds that a later
        outcome no longer lists (unless it says :meth:`keep_children`).
        Its kind must be declared with
        :meth:`Manifest.owns <capstan_guest.Manifest.owns>`."""
        self._wit.children.append(_json(child))
        return self

    def child_in(self, cluster: str, child: Mapping[str, Any]) -> "Outcome":
        """A desired child object in the member cluster ``cluster`` of a
        fleet controller (see :meth:`Manifest.fleet
        <capstan_guest.Manifest.fleet>`), one of :attr:`Context.members
        <capstan_guest.Context.members>`. The host applies it there by
        server-side apply, marks it with labels and annotations naming its
        owner (a member has no ownerReference to an object of another
        cluster), defaults its namespace to the owner's, and prunes
        children of owned kinds a later outcome no longer lists in that
        member, as for :meth:`child`::

            for member in ctx.members:
                outcome.child_in(member, configmap)
        """
        if not isinstance(cluster, str):
            raise TypeError(f"cluster must be a cluster name (str), not {type(cluster).__name__}")
        self._wit.member_children.append(_wit.MemberChild(cluster=cluster, object=_json(child)))
        return self

    def status(self, status: Mapping[str, Any]) -> "Outcome":
        """The desired ``status`` of the reconciled object (the status field
        only), written through the status subresource.
        ``observedGeneration`` is filled in when absent."""
        self._wit.status = _json(status)
        return self

    def event(self, event: Event) -> "Outcome":
        """An event to record about the reconciled object (or the one
        :meth:`Event.regarding` names)."""
        self._wit.events.append(event._wit)
        return self

    def requeue_after(self, delay: Union[float, timedelta]) -> "Outcome":
        """Reconcile this object again after ``delay`` (seconds, or a
        ``timedelta``), even if nothing changes."""
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        self._wit.requeue_after_ms = max(0, min(int(seconds * 1000), 2**64 - 1))
        return self

    def keep_children(self, keep: bool = True) -> "Outcome":
        """Keeps existing children as they are: the children listed (if
        any) are applied, none is deleted. Without it, children of owned
        kinds the outcome does not list are pruned, which is right for an
        outcome that lists every child there should be and wrong for one
        that, say, could not read everything it needs yet::

            if source is None:   # not there yet: leave the children alone
                return capstan.Outcome().keep_children().requeue_after(30)

        Kept children stay owned: they are deleted with the object later.
        From :meth:`Controller.delete` it keeps them for good: the host
        removes its ownerReference from every child before it removes its
        finalizer, so the garbage collector leaves them (other owners'
        references stay). ``keep_children(False)`` restores the default
        (prune)."""
        self._wit.children_policy = _wit.ChildrenPolicy.KEEP if keep else _wit.ChildrenPolicy.PRUNE
        return self

    @property
    def keeps_children(self) -> bool:
        """True if :meth:`keep_children` was called: no child is pruned."""
        return self._wit.children_policy == _wit.ChildrenPolicy.KEEP

    def _into_wit(self) -> _wit.Outcome:
        return self._wit
