"""The :class:`Controller` base class, and how a reconcile request reaches
it."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Type

from componentize_py_types import Err
from wit_world.imports import capstan_operator_types as _wit

from . import _json
from .context import Context, EventKind, FailedChild
from .errors import ApiError, ReconcileError, Terminal, Transient, from_api_error
from .log import log
from .manifest import Manifest
from .outcome import Outcome
from .tracebacks import format_exc


class Controller:
    """A controller: declares what it needs, and reconciles objects of its
    primary kind.

    Override at least :meth:`manifest` and :meth:`reconcile`, and export the
    class with :func:`~capstan_guest.export`. A fresh instance is made for
    every call, so keep no state in it: what must survive a call belongs in the cluster
    (status, annotations, children).

    Raise :class:`~capstan_guest.Transient` to retry with backoff and
    :class:`~capstan_guest.Terminal` to wait for the next change (the host
    records a Warning event); either may carry a status and events, and
    keeps the children as they are. An :class:`~capstan_guest.ApiError` that
    escapes is transient (terminal for :class:`~capstan_guest.Denied`);
    any other exception is logged with its traceback and is transient.
    """

    def manifest(self) -> Manifest:
        """What this controller declares: primary kind, CRDs, owned and
        watched kinds, finalizer, permissions, resync period, concurrency.
        Called once when the component is loaded; must not call the API."""
        raise NotImplementedError("a controller must define manifest()")

    def add(self, ctx: Context, obj: Dict[str, Any]) -> Outcome:
        """Called for an object this controller has not handled before.
        Defaults to :meth:`reconcile`."""
        return self.reconcile(ctx, obj)

    def modify(self, ctx: Context, obj: Dict[str, Any]) -> Outcome:
        """Called for an object that changed since it was last handled.
        Defaults to :meth:`reconcile`."""
        return self.reconcile(ctx, obj)

    def delete(self, ctx: Context, obj: Dict[str, Any]) -> Outcome:
        """Called for an object that is being deleted. With a finalizer
        declared, the host keeps the object until this succeeds. Children
        need no cleanup: they are owned and garbage collected once the
        object is gone. An outcome that says
        :meth:`~capstan_guest.Outcome.keep_children` keeps them instead: the
        host removes its ownerReference from each before it removes the
        finalizer. No children are applied and no status is written for
        this call; its events are recorded.

        Defaults to :meth:`reconcile`, with the children following the
        object whatever that outcome says about keeping them (a reconcile
        keeps children while it waits for something, which is no reason to
        keep them for good). Override it to keep them."""
        outcome = self.reconcile(ctx, obj)
        return outcome.keep_children(False) if isinstance(outcome, Outcome) else outcome

    def reconcile(self, ctx: Context, obj: Dict[str, Any]) -> Outcome:
        """Brings the world in line with ``obj`` (the object as a dict).
        Called directly on resync, and by the default :meth:`add`,
        :meth:`modify` and :meth:`delete`."""
        raise NotImplementedError("a controller must define reconcile()")


def _failure(error: ReconcileError) -> Err[_wit.Failure]:
    """The WIT ``failure`` for a reconcile error, as the export's ``Err``."""
    return Err(
        _wit.Failure(
            kind=_wit.FailureKind.TERMINAL if isinstance(error, Terminal) else _wit.FailureKind.TRANSIENT,
            message=error.message,
            status=error._status_json,
            events=[event._wit for event in error.events],
        )
    )


def callback_for(instance: Controller, event: EventKind) -> Callable[[Context, Dict[str, Any]], Outcome]:
    """The method of ``instance`` the host calls for ``event``."""
    return {
        EventKind.ADDED: instance.add,
        EventKind.MODIFIED: instance.modify,
        EventKind.DELETED: instance.delete,
        EventKind.RESYNC: instance.reconcile,
    }[event]


def run_reconcile(controller: Type[Controller], request: _wit.ReconcileRequest) -> _wit.Outcome:
    """Decodes the object, calls the controller's callback for the
    request's event and converts what it returns or raises; raises ``Err``
    with a ``failure``."""
    try:
        obj = _json.loads(request.object)
    except ValueError as e:
        raise _failure(Terminal(f"object is not valid JSON: {e}")) from None
    if not isinstance(obj, dict):
        raise _failure(Terminal("object is not a JSON object"))
    meta = obj.get("metadata") or {}
    namespace: Optional[str] = meta.get("namespace")
    failed = [FailedChild._from_wit(c) for c in request.failed_children]
    ctx = Context(
        EventKind._from_wit(request.event),
        namespace,
        meta.get("name") or "",
        failed,
        request.cluster,
        list(request.members),
    )
    callback = callback_for(controller(), ctx.event)
    try:
        outcome = callback(ctx, obj)
    except ReconcileError as e:
        raise _failure(e) from None
    except ApiError as e:
        raise _failure(from_api_error(e)) from None
    except Exception as e:  # noqa: BLE001 - a bug in the controller must not trap the host call
        log.error("unhandled exception in reconcile", error=repr(e), traceback=format_exc())
        raise _failure(Transient(f"unhandled {type(e).__name__}: {e}")) from None
    if outcome is None:
        return Outcome()._into_wit()
    if not isinstance(outcome, Outcome):
        raise _failure(Terminal(f"reconcile returned {type(outcome).__name__}, not an Outcome"))
    return outcome._into_wit()
