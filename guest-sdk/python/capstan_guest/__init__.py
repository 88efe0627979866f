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

    Controller, Admission, Conversion, Scheduler = capstan.export(Mirror)

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

Besides reconciling, a component may serve admission webhooks
(:class:`Admission`, declared with :meth:`Manifest.webhook`), convert its
CRD between versions (:class:`Conversion`, :func:`between`, declared with
:meth:`Manifest.converts`) and schedule Pods (:class:`Scheduler`,
:class:`NodeInfo`, :func:`pod_requests`, :func:`tolerates`, declared with
:meth:`Manifest.scheduler`), in any mix: name each role's class in
:func:`export`. It may call HTTP(S) origins it declares with
:meth:`Manifest.egress`, through :func:`capstan_guest.http.request`.
"""

from . import _plain  # noqa: F401 - first: the WIT bindings, also under plain CPython

from . import http
from .admission import Admission, AdmissionRequest, Operation, Undecodable, UserInfo, Verdict, Webhook
from .api import Api, PatchType, Propagation
from .component import Component
from .conditions import Condition, find_condition, is_condition_true, remove_condition, set_condition
from .context import Context, EventKind, FailedChild
from .controller import Controller
from .conversion import Conversion, between
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
from .kinds import GroupVersionKind
from .log import Level, Log, Span, log
from .manifest import ALL_VERBS, READ_VERBS, Field, Manifest, Mapping, Permission, Scope, Verb, Watch
from .export import Exports, export
from .outcome import Event, Outcome
from .scheduler import NodeInfo, Resources, Scheduler, Unschedulable, parse_quantity, pod_requests, tolerates

__all__ = [
    "ALL_VERBS",
    "Admission",
    "AdmissionRequest",
    "AlreadyExists",
    "Api",
    "ApiError",
    "ApiStatus",
    "BadRequest",
    "Component",
    "Condition",
    "Conflict",
    "Context",
    "Controller",
    "Conversion",
    "Decode",
    "Denied",
    "Event",
    "EventKind",
    "Exports",
    "FailedChild",
    "Field",
    "GroupVersionKind",
    "Forbidden",
    "Invalid",
    "Level",
    "Log",
    "Manifest",
    "Mapping",
    "NodeInfo",
    "NotFound",
    "Operation",
    "OtherApiError",
    "Outcome",
    "PatchType",
    "Permission",
    "Propagation",
    "READ_VERBS",
    "ReconcileError",
    "Resources",
    "Scheduler",
    "Scope",
    "Span",
    "Terminal",
    "Transient",
    "Unavailable",
    "Undecodable",
    "Unschedulable",
    "UserInfo",
    "Verb",
    "Verdict",
    "Watch",
    "Webhook",
    "between",
    "export",
    "find_condition",
    "http",
    "is_condition_true",
    "log",
    "parse_quantity",
    "pod_requests",
    "remove_condition",
    "set_condition",
    "tolerates",
]
