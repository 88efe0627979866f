"""Unit tests of a controller under plain CPython (pytest), without a
component, a host or a cluster.

:class:`FakeHost` stands in for the host's imports: a small in-memory API
server holding the objects a test gives it, recording every call, Event
and log line. :func:`reconcile` calls a controller's callback the way the
host does and returns what it asked for as plain data::

    import capstan_guest as capstan
    from capstan_guest.testing import FakeHost, reconcile

    from app import Greeter

    def test_publishes_the_message():
        done = reconcile(Greeter, {"apiVersion": "example.com/v1alpha1", "kind": "Greeting",
                                   "metadata": {"name": "hi", "namespace": "demo", "generation": 1},
                                   "spec": {"message": "hello"}})
        assert done.children[0]["data"] == {"message": "hello"}
        assert done.status["observedGeneration"] == 1

    def test_an_empty_message_is_terminal():
        with pytest.raises(capstan.Terminal, match="must not be empty"):
            reconcile(Greeter, {..., "spec": {"message": ""}})

Importing ``capstan_guest`` under plain CPython generates the WIT bindings
once (see :mod:`capstan_guest._plain`). The fake answers ``get``, ``list``
(label selectors ``k=v``, ``k!=v``, ``k``), ``create``, ``replace``,
``delete``, merge ``patch`` and ``apply`` (the applied fields merged into
what is stored) and their status variants; the host's grant checks,
server-side apply field ownership and admission are not faked: the
scenarios (``capstan test``) and ``capstan e2e`` cover those.

:func:`schedule` calls a scheduler's policy the way the host does, with the
Nodes given as plain Node objects and the Pods already bound to them::

    from capstan_guest.testing import node, schedule

    def test_spreads_over_zones():
        nodes = [node("a1", labels={"zone": "a"}, cpu="2"), node("b1", labels={"zone": "b"}, cpu="2")]
        bound = [{"spec": {"nodeName": "a1", "containers": [{"resources": {"requests": {"cpu": "1"}}}]}}]
        assert schedule(ZoneSpread, pending_pod, nodes, pods=bound) == "b1"

It runs the policy under a :class:`FakeHost` too (``host=`` to give one),
so a policy that logs is tested as it runs, its lines in ``host.logs``.

HTTP calls (:mod:`capstan_guest.http`) never leave the process: the fake
answers the origins a test stubs with :meth:`FakeHost.http` (a response, a
function of the request, or an error to raise), refuses the others as the
host refuses origins the manifest does not declare, and records every
request in ``host.requests``::

    from capstan_guest.http import HttpError, Response

    def test_reports_the_ticket():
        host = FakeHost([alert]).http("https://hooks.example.com", Response.of_json({"id": 7}))
        done = reconcile(Notifier, alert, host=host)
        assert host.requests[0].json() == {"name": "disk-full"}
        assert done.status == {"ticket": 7}

    def test_an_unreachable_hook_is_retried():
        host = FakeHost([alert]).http("https://hooks.example.com", HttpError("connection-refused", ""))
        with pytest.raises(HttpError):
            reconcile(Notifier, alert, host=host)

A fleet controller (:meth:`Manifest.fleet <capstan_guest.Manifest.fleet>`)
is given its members with ``members=``; the fake holds the objects of each
other cluster under its name (``clusters=`` or ``put(obj, cluster=...)``),
answers :meth:`Context.api_in <capstan_guest.Context.api_in>` reads from
the cluster named, and refuses a read in a cluster that is neither the
request's own nor a member with :class:`~capstan_guest.Denied`, as the
host does; the children the outcome places in members are in
``member_children``::

    def test_spreads_to_every_member():
        host = FakeHost([spread], clusters={"eu": [copy_in_eu]})
        done = reconcile(Spreader, spread, host=host, members=["eu", "us"])
        assert [c.cluster for c in done.member_children] == ["eu", "us"]
        assert done.children_in("us")[0]["data"] == {"message": "hello"}
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple, Type, Union

from componentize_py_types import Err
from wit_world.imports import events as _events
from wit_world.imports import kube as _kube
from wit_world.imports import log as _log

from . import http as _http
from .context import Context, EventKind, FailedChild
from .controller import Controller, callback_for
from .outcome import Outcome
from .scheduler import NodeInfo, Resources, Scheduler, Unschedulable, parse_quantity, pod_requests

Key = Tuple[str, str, Optional[str], str]
"""``(apiVersion, kind, namespace, name)`` of a stored object."""

Answer = Union[_http.Response, BaseException, Callable[[_http.Request], Union[_http.Response, BaseException]]]
"""What :meth:`FakeHost.http` answers with: a response, an error to raise
(e.g. :class:`~capstan_guest.http.HttpError`), or a function of the
request returning either."""

_KUBE = [
    "get",
    "list",
    "create",
    "replace",
    "patch",
    "apply",
    "delete",
    "replace_status",
    "patch_status",
    "apply_status",
    "get_in",
    "list_in",
]


def _api_version(gvk: Any) -> str:
    return f"{gvk.group}/{gvk.version}" if gvk.group else gvk.version


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(obj.get("apiVersion", "")), str(obj.get("kind", "")), meta.get("namespace"), str(meta.get("name", "")))


def _ref_key(ref: Any) -> Key:
    return (_api_version(ref.kind), ref.kind.kind, ref.namespace, ref.name)


def _error(variant: Any, code: int, reason: str, message: str) -> Err:
    return Err(variant(_kube.Status(code=code, reason=reason, message=message)))


def _merge(into: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386): ``null`` removes a field."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(into) if isinstance(into, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = _merge(result.get(k), v)
    return result


def _selected(labels: Mapping[str, str], selector: Optional[str]) -> bool:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            k, v = (s.strip() for s in term.split("!=", 1))
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, _, v = term.partition("=")
            if labels.get(k.strip()) != v.lstrip("=").strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class FakeHost:
    """The host's imports, in memory: objects by ``(apiVersion, kind,
    namespace, name)``, and what the code under test did.

    Use it as a context manager (``with FakeHost(objects) as host:``) or let
    :func:`reconcile` install it; outside, the imports are the generated
    ones again."""

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]] = (),
        *,
        clusters: Optional[Mapping[str, Iterable[Mapping[str, Any]]]] = None,
    ) -> None:
        """A fake holding ``objects`` (each with apiVersion, kind and
        metadata.name) in the request's own cluster, and ``clusters``: the
        objects of other clusters (a fleet controller's members), by
        cluster name."""
        self.objects: Dict[Key, Dict[str, Any]] = {}
        """What the fake API server of the request's own cluster stores."""
        self.clusters: Dict[str, Dict[Key, Dict[str, Any]]] = {}
        """What the other clusters store, by cluster name: read with
        :meth:`Context.api_in <capstan_guest.Context.api_in>` (which never
        writes). A name equal to the request's own cluster adds to
        :attr:`objects` for those reads."""
        self.cluster: str = "default"
        """The request's own cluster, whose objects are :attr:`objects`;
        :func:`reconcile` sets it from its ``cluster``."""
        self.members: List[str] = []
        """The member clusters engaged now, which ``api_in`` may read
        besides :attr:`cluster`; :func:`reconcile` sets it from its
        ``members``."""
        self.calls: List[Tuple[Any, ...]] = []
        """Every import called, as ``("kube.get", args...)``, in order."""
        self.events: List[Dict[str, Any]] = []
        """Events recorded with ``ctx.record``: ``type``, ``reason``, ``action``, ``note``."""
        self.logs: List[Tuple[str, str, Dict[str, str]]] = []
        """Log lines: ``(level, message, fields)``."""
        self.spans: List[Dict[str, Any]] = []
        """Spans opened with ``ctx.span`` / ``log.span``, in order: ``name``,
        ``parent`` (the name of the span it was opened in, or ``None``),
        ``attributes``, ``error`` (or ``None``) and ``ended`` (whether it
        ended before the call returned)."""
        self._open: List[int] = []
        self.requests: List[_http.Request] = []
        """HTTP requests made with :mod:`capstan_guest.http`, in order,
        refused ones included."""
        self._origins: Dict[str, Answer] = {}
        self._saved: List[Tuple[Any, str, Any]] = []
        self._version = 0
        for obj in objects:
            self.put(obj)
        for name, held in (clusters or {}).items():
            self.clusters.setdefault(name, {})
            for obj in held:
                self.put(obj, cluster=name)

    def put(self, obj: Mapping[str, Any], cluster: Optional[str] = None) -> Dict[str, Any]:
        """Stores ``obj`` as the API server would after a write (a copy, with
        a fresh ``resourceVersion``) and returns the stored copy; in the
        request's own cluster, or with ``cluster`` in that other cluster
        (:attr:`clusters`)."""
        stored = copy.deepcopy(dict(obj))
        self._version += 1
        stored.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        store = self.objects if cluster is None else self.clusters.setdefault(cluster, {})
        store[_key(stored)] = stored
        return stored

    def get(
        self, api_version: str, kind: str, namespace: Optional[str], name: str, cluster: Optional[str] = None
    ) -> Optional[Dict[str, Any]]:
        """The stored object, or ``None``; with ``cluster``, in that other
        cluster."""
        store = self.objects if cluster is None else self.clusters.get(cluster, {})
        return store.get((api_version, kind, namespace, name))

    def _readable(self, cluster: str) -> Dict[Key, Dict[str, Any]]:
        """The objects ``kube.get-in`` and ``kube.list-in`` see in
        ``cluster``; ``error.denied`` for a cluster that is neither the
        request's own nor one of its members, as on the host."""
        if cluster == self.cluster:
            return {**self.clusters.get(cluster, {}), **self.objects}
        if cluster in self.members:
            return self.clusters.get(cluster, {})
        members = ", ".join(repr(m) for m in self.members) or "none"
        why = f"cluster {cluster!r} is neither this request's own ({self.cluster!r}) nor one of its members ({members})"
        raise Err(_kube.Error_Denied(why))

    def http(self, origin: str, answer: Answer) -> "FakeHost":
        """Answers HTTP requests to ``origin`` (``scheme://host[:port]``;
        any path) with ``answer``: a :class:`~capstan_guest.http.Response`,
        an exception to raise, or a function of the
        :class:`~capstan_guest.http.Request` returning either. Requests to
        origins not stubbed fail with
        :class:`~capstan_guest.http.HttpError` ``http-request-denied``, as
        the host refuses origins the manifest does not declare. Returns the
        fake, to chain::

            host = FakeHost().http("https://api.example.com", lambda req: Response.of_json({"path": req.url}))
        """
        self._origins[_http.origin_of(origin)] = answer
        return self

    # The imports.

    def _http_send(self, request: _http.Request, timeout: Optional[float]) -> _http.Response:
        self.requests.append(request)
        self.calls.append(("http.request", request))
        if request.origin not in self._origins:
            raise _http.HttpError(
                "http-request-denied", f"{request.origin} is not stubbed: FakeHost().http({request.origin!r}, ...)"
            )
        answer = self._origins[request.origin]
        if callable(answer) and not isinstance(answer, (BaseException, _http.Response)):
            answer = answer(copy.deepcopy(request))
        if isinstance(answer, BaseException):
            raise answer
        if not isinstance(answer, _http.Response):
            raise TypeError(f"a FakeHost.http stub answered {type(answer).__name__}, not a Response")
        return copy.deepcopy(answer)

    def _kube_get(self, ref: Any) -> bytes:
        found = self.objects.get(_ref_key(ref))
        if found is None:
            raise _error(_kube.Error_NotFound, 404, "NotFound", f'{ref.kind.kind} "{ref.name}" not found')
        return json.dumps(found).encode()

    def _kube_get_in(self, cluster: str, ref: Any) -> bytes:
        found = self._readable(cluster).get(_ref_key(ref))
        if found is None:
            raise _error(_kube.Error_NotFound, 404, "NotFound", f'{ref.kind.kind} "{ref.name}" not found')
        return json.dumps(found).encode()

    def _kube_list(
        self, gvk: Any, namespace: Optional[str], params: Any, objects: Optional[Dict[Key, Dict[str, Any]]] = None
    ) -> List[bytes]:
        if params.field_selector:
            raise Err(_kube.Error_BadRequest("the fake host does not evaluate field selectors"))
        held = self.objects if objects is None else objects
        return [
            json.dumps(obj).encode()
            for (api_version, kind, ns, _), obj in sorted(held.items(), key=lambda kv: str(kv[0]))
            if (api_version, kind) == (_api_version(gvk), gvk.kind)
            and (namespace is None or ns == namespace)
            and _selected((obj.get("metadata") or {}).get("labels") or {}, params.label_selector)
        ]

    def _kube_create(self, data: bytes) -> bytes:
        obj = json.loads(data)
        if _key(obj) in self.objects:
            raise _error(_kube.Error_AlreadyExists, 409, "AlreadyExists", f'{obj.get("kind")} already exists')
        return json.dumps(self.put(obj)).encode()

    def _kube_replace(self, data: bytes) -> bytes:
        obj = json.loads(data)
        if _key(obj) not in self.objects:
            raise _error(_kube.Error_NotFound, 404, "NotFound", f'{obj.get("kind")} not found')
        return json.dumps(self.put(obj)).encode()

    def _patched(self, ref: Any, patch_type: Any, patch: bytes, status_only: bool) -> bytes:
        current = self.objects.get(_ref_key(ref))
        if current is None:
            raise _error(_kube.Error_NotFound, 404, "NotFound", f'{ref.kind.kind} "{ref.name}" not found')
        if patch_type != _kube.PatchType.MERGE:
            raise Err(_kube.Error_BadRequest(f"the fake host applies merge patches only, not {patch_type.name.lower()}"))
        change = json.loads(patch)
        if status_only:
            change = {"status": change.get("status")} if isinstance(change, dict) and "status" in change else {}
        return json.dumps(self.put(_merge(current, change))).encode()

    def _applied(self, data: bytes, status_only: bool) -> bytes:
        obj = json.loads(data)
        current = self.objects.get(_key(obj))
        if status_only:
            if current is None:
                raise _error(_kube.Error_NotFound, 404, "NotFound", f'{obj.get("kind")} not found')
            obj = {"status": obj.get("status")}
        return json.dumps(self.put(_merge(current or {}, obj))).encode()

    def _kube_delete(self, ref: Any, propagation: Any) -> None:
        if self.objects.pop(_ref_key(ref), None) is None:
            raise _error(_kube.Error_NotFound, 404, "NotFound", f'{ref.kind.kind} "{ref.name}" not found')

    def _record(self, event: Any) -> None:
        self.events.append(_event(event))

    def _log(self, level: Any, message: str, fields: List[Any]) -> None:
        self.logs.append((level.name.lower(), message, {f.key: f.value for f in fields}))

    def _start_span(self, name: str, attributes: List[Any]) -> int:
        parent = self.spans[self._open[-1]]["name"] if self._open else None
        self._open.append(len(self.spans))
        self.spans.append(
            {
                "name": name,
                "parent": parent,
                "attributes": {f.key: f.value for f in attributes},
                "error": None,
                "ended": False,
            }
        )
        return len(self.spans)

    def _end_span(self, id: int, error: Optional[str]) -> None:
        # Ends it and the spans opened inside it, as the host does.
        if id - 1 not in self._open:
            return
        at = self._open.index(id - 1)
        self.spans[id - 1]["error"] = error
        for index in self._open[at:]:
            self.spans[index]["ended"] = True
        del self._open[at:]

    def _fakes(self) -> List[Tuple[Any, str, Any]]:
        fakes = {
            "get": self._kube_get,
            "list": self._kube_list,
            "create": self._kube_create,
            "replace": self._kube_replace,
            "patch": lambda ref, t, p: self._patched(ref, t, p, False),
            "apply": lambda data, force: self._applied(data, False),
            "delete": self._kube_delete,
            "replace_status": lambda data: self._applied(data, True),
            "patch_status": lambda ref, t, p: self._patched(ref, t, p, True),
            "apply_status": lambda data, force: self._applied(data, True),
            "get_in": self._kube_get_in,
            "list_in": lambda cluster, gvk, ns, params: self._kube_list(gvk, ns, params, self._readable(cluster)),
        }
        return [(_kube, name, self._recorded(f"kube.{name}", fakes[name])) for name in _KUBE] + [
            (_events, "record", self._recorded("events.record", self._record)),
            (_log, "log", self._log),
            (_log, "start_span", self._start_span),
            (_log, "end_span", self._end_span),
            (_http, "_send", self._http_send),
        ]

    def _recorded(self, name: str, function: Any) -> Any:
        def call(*args: Any) -> Any:
            self.calls.append((name, *args))
            return function(*args)

        return call

    def __enter__(self) -> "FakeHost":
        for module, name, fake in self._fakes():
            self._saved.append((module, name, getattr(module, name)))
            setattr(module, name, fake)
        return self

    def __exit__(self, *exc: Any) -> None:
        while self._saved:
            module, name, original = self._saved.pop()
            setattr(module, name, original)
        # The call is over: spans still open end with it, as on the host.
        self._open.clear()


def _event(event: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "type": "Warning" if event.event_type.name == "WARNING" else "Normal",
        "reason": event.reason,
        "action": event.action,
        "note": event.note,
    }
    if event.regarding is not None:
        ref = event.regarding
        out["regarding"] = {
            "apiVersion": _api_version(ref.kind),
            "kind": ref.kind.kind,
            "namespace": ref.namespace,
            "name": ref.name,
        }
    return out


class MemberChild(NamedTuple):
    """A child the outcome places in a member cluster
    (:meth:`Outcome.child_in <capstan_guest.Outcome.child_in>`): a
    ``(cluster, object)`` pair."""

    cluster: str
    """The member cluster it goes to."""
    object: Dict[str, Any]
    """The object, as the controller wrote it."""


@dataclass
class Reconciled:
    """What a reconcile asked the host to do, as plain data."""

    children: List[Dict[str, Any]] = field(default_factory=list)
    """The desired children, as the controller wrote them."""
    status: Optional[Dict[str, Any]] = None
    """The desired status, or ``None``."""
    events: List[Dict[str, Any]] = field(default_factory=list)
    """The outcome's Events (``type``, ``reason``, ``action``, ``note``)."""
    requeue_after: Optional[float] = None
    """Seconds until the host reconciles again unasked, or ``None``."""
    keep_children: bool = False
    """Whether children the outcome does not list are kept (not pruned)."""
    member_children: List[MemberChild] = field(default_factory=list)
    """The desired children in member clusters, in the order given."""

    def children_in(self, cluster: str) -> List[Dict[str, Any]]:
        """The desired children in the member cluster ``cluster``."""
        return [child.object for child in self.member_children if child.cluster == cluster]

    @staticmethod
    def of(outcome: Outcome) -> "Reconciled":
        """The plain data of an :class:`~capstan_guest.Outcome`."""
        wit = outcome._into_wit()
        return Reconciled(
            children=[json.loads(child) for child in wit.children],
            status=None if wit.status is None else json.loads(wit.status),
            events=[_event(event) for event in wit.events],
            requeue_after=None if wit.requeue_after_ms is None else wit.requeue_after_ms / 1000,
            keep_children=outcome.keeps_children,
            member_children=[MemberChild(c.cluster, json.loads(c.object)) for c in wit.member_children],
        )


def reconcile(
    controller: Type[Controller],
    obj: Mapping[str, Any],
    *,
    event: Union[EventKind, str] = EventKind.ADDED,
    host: Optional[FakeHost] = None,
    failed_children: Iterable[FailedChild] = (),
    cluster: str = "default",
    members: Iterable[str] = (),
) -> Reconciled:
    """Calls ``controller``'s callback for ``event`` (``add`` for
    ``"added"``, ``modify``, ``delete``, ``reconcile`` for ``"resync"``) on
    a copy of ``obj``, as the host would, with ``host`` (default: a fresh
    :class:`FakeHost` holding ``obj``) answering its API calls,
    ``cluster`` as :attr:`Context.cluster <capstan_guest.Context.cluster>`
    and ``members`` (a fleet controller's member clusters engaged now) as
    :attr:`Context.members <capstan_guest.Context.members>`; the host's
    :attr:`~FakeHost.cluster` and :attr:`~FakeHost.members` are set to
    them, so ``api_in`` reads there and nowhere else.
    Returns the
    outcome as :class:`Reconciled`; what the callback raises
    (:class:`~capstan_guest.Terminal`, :class:`~capstan_guest.Transient`,
    a bug) propagates, so ``pytest.raises`` checks it."""
    kind = event if isinstance(event, EventKind) else EventKind(event)
    obj = copy.deepcopy(dict(obj))
    meta = obj.get("metadata") or {}
    fake = host if host is not None else FakeHost([obj])
    members = [members] if isinstance(members, str) else list(members)
    ctx = Context(kind, meta.get("namespace"), meta.get("name") or "", failed_children, cluster, members)
    fake.cluster = cluster
    fake.members = list(members)
    callback = callback_for(controller(), kind)
    with fake:
        outcome = callback(ctx, obj)
    if outcome is None:
        return Reconciled()
    if not isinstance(outcome, Outcome):
        raise TypeError(f"reconcile returned {type(outcome).__name__}, not an Outcome")
    return Reconciled.of(outcome)


def node(
    name: str,
    *,
    labels: Optional[Mapping[str, str]] = None,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: str = "110",
    ready: bool = True,
    unschedulable: bool = False,
    taints: Iterable[Mapping[str, Any]] = (),
) -> Dict[str, Any]:
    """A ``v1`` Node as the host hands it to a scheduler: ``allocatable``
    (and ``capacity``) ``cpu``, ``memory`` and ``pods``, a ``Ready``
    condition, and ``spec.unschedulable`` and ``spec.taints`` when given."""
    spec: Dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def node_infos(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = ()) -> List[NodeInfo]:
    """What the host hands a scheduler for these Nodes: one
    :class:`~capstan_guest.NodeInfo` per Node, in name order, with its
    allocatable resources (milli-units) and what the ``pods`` bound to it
    (``spec.nodeName``) request, as the host's account counts them."""
    requested: Dict[str, Resources] = {}
    counts: Dict[str, int] = {}
    for pod in pods:
        at = (pod.get("spec") or {}).get("nodeName")
        if not at:
            continue
        counts[at] = counts.get(at, 0) + 1
        total = requested.setdefault(at, {})
        for resource, amount in pod_requests(dict(pod)).items():
            total[resource] = total.get(resource, 0) + amount
    infos = []
    for n in sorted(nodes, key=lambda n: (n.get("metadata") or {}).get("name") or ""):
        name = (n.get("metadata") or {}).get("name") or ""
        allocatable = {
            resource: parse_quantity(q) or 0 for resource, q in ((n.get("status") or {}).get("allocatable") or {}).items()
        }
        infos.append(NodeInfo(name, copy.deepcopy(dict(n)), allocatable, requested.get(name, {}), counts.get(name, 0)))
    return infos


def schedule(
    scheduler: Type[Scheduler],
    pod: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    *,
    pods: Iterable[Mapping[str, Any]] = (),
    host: Optional[FakeHost] = None,
    cluster: str = "default",
) -> str:
    """Calls ``scheduler``'s :meth:`~capstan_guest.Scheduler.schedule` on a
    copy of ``pod`` with :func:`node_infos` of ``nodes`` and the bound
    ``pods``, as the host does at one attempt, with ``host`` (default: an
    empty :class:`FakeHost`) answering its imports: what the policy logs
    with :data:`capstan_guest.log` is in ``host.logs``, and ``cluster`` as
    :attr:`Scheduler.cluster <capstan_guest.Scheduler.cluster>`. Returns the Node it
    picked. A Pod that fits nowhere raises
    :class:`~capstan_guest.Unschedulable` (returned or raised by the
    policy), so ``pytest.raises(capstan.Unschedulable, match=...)`` checks
    the reasons. The name is not checked against the Nodes: the host
    reports a Node that does not exist as a failed attempt; assert on it."""
    infos = node_infos(nodes, pods)
    instance = scheduler()
    instance.cluster = cluster
    with host if host is not None else FakeHost():
        picked = instance.schedule(copy.deepcopy(dict(pod)), infos)
    if isinstance(picked, Unschedulable):
        raise picked
    if not isinstance(picked, str):
        raise TypeError(f"schedule returned {type(picked).__name__}, not a Node name")
    return picked
