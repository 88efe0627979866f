"""Write Kubernetes controllers for the Capstan host in Python, as
WebAssembly components built with componentize-py.

A controller is a subclass of :class:`Controller`: it declares what it
needs in a :class:`Manifest` and turns one object of its primary kind (a
dict) into an :class:`Outcome`: the children it wants, the status to
write, events to record, and when to look again. The host owns everything
else: connections, watches, caches, queues, retries, finalizers,
server-side apply of the children, owner references and pruning::

    import capstan_guest as capstan

    class Mirror(capstan.Controller):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("mirror").primary("v1", "ConfigMap").owns("v1", "ConfigMap")

        def reconcile(self, ctx: capstan.Context, source: dict) -> capstan.Outcome:
            ctx.log.info("mirroring", name=ctx.name)
            copy = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": f"{ctx.name}-copy"}, "data": source.get("data", {})}
            return capstan.Outcome().child(copy)

    Controller = capstan.export(Mirror)

Build with ``componentize-py -d wit -w operator componentize -p <sdk dir>
app -o app.wasm`` (see ``docs/guests/python.md``).

The reconcile contract is the Rust SDK's: the host calls ``add``,
``modify``, ``delete`` or, for a resync, ``reconcile`` (the first three
forward to ``reconcile`` unless overridden); reconciles must be
idempotent. Raise :class:`Transient` to retry with backoff and
:class:`Terminal` to wait for the next change; either may carry a status
and events (``Terminal("bad spec", status={...}, events=[...])``), and the
children stay as they are. ``Outcome().keep_children()`` applies the
children it lists and prunes none. Children the API server refused last
time are in ``ctx.failed_children``. :func:`set_condition` and
:func:`find_condition` maintain ``status.conditions``.
"""

from .api import Api, PatchType, Propagation
from .conditions import Condition, find_condition, is_condition_true, remove_condition, set_condition
from .context import Context, EventKind, FailedChild
from .controller import Controller, export
from .errors import (
    AlreadyExists,
    ApiError,
    ApiStatus,
    BadRequest,
    Conflict,
    Decode,
    Denied,
    Forbidden,
    Invalid,
    NotFound,
    OtherApiError,
    ReconcileError,
    Terminal,
    Transient,
    Unavailable,
)
from .log import Level, Log, log
from .manifest import ALL_VERBS, READ_VERBS, Field, Manifest, Mapping, Permission, Scope, Verb, Watch
from .outcome import Event, Outcome

__all__ = [
    "ALL_VERBS",
    "AlreadyExists",
    "Api",
    "ApiError",
    "ApiStatus",
    "BadRequest",
    "Condition",
    "Conflict",
    "Context",
    "Controller",
    "Decode",
    "Denied",
    "Event",
    "EventKind",
    "FailedChild",
    "Field",
    "Forbidden",
    "Invalid",
    "Level",
    "Log",
    "Manifest",
    "Mapping",
    "NotFound",
    "OtherApiError",
    "Outcome",
    "PatchType",
    "Permission",
    "Propagation",
    "READ_VERBS",
    "ReconcileError",
    "Scope",
    "Terminal",
    "Transient",
    "Unavailable",
    "Verb",
    "Watch",
    "export",
    "find_condition",
    "is_condition_true",
    "log",
    "remove_condition",
    "set_condition",
]
