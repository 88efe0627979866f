"""Custom schedulers: pick the Node a pending Pod runs on.

Declare the scheduler name with :meth:`Manifest.scheduler
<capstan_guest.Manifest.scheduler>`, subclass :class:`Scheduler`, and export
it with ``scheduler=``. The host watches the Pods that name the scheduler
in ``spec.schedulerName`` and have no Node, keeps an account of every Node,
calls :meth:`Scheduler.schedule` once per attempt, binds the Pod, records
the ``Scheduled`` / ``FailedScheduling`` Events and retries with backoff::

    class FirstFit(capstan.Scheduler):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("first-fit").scheduler("first-fit")

        def schedule(self, pod: dict, nodes: list[capstan.NodeInfo]) -> str:
            needed = capstan.pod_requests(pod)
            for node in nodes:
                if node.fits(needed):
                    return node.name
            raise capstan.Unschedulable(f"{len(nodes)} nodes have too little room")
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, Iterable, List, Optional, Type, Union

from componentize_py_types import Err
from wit_world.imports import capstan_operator_types as _wit

from . import _json
from .component import Component
from .log import log
from .tracebacks import format_exc

Resources = Dict[str, int]
"""Resource amounts by name (``cpu``, ``memory``, ``pods``, ...), in
milli-units: CPU in millicores, memory in thousandths of a byte."""


class NodeInfo:
    """A candidate Node and what the host knows of it.

    The Node itself (:attr:`node`, a dict) is decoded from the JSON the host
    hands over on first use, and only then. An instance keeps the Nodes
    between attempts and the host hands over only those that changed, so a
    Node is decoded at most once per change (treat a ``NodeInfo`` as
    read-only), and a policy that reads the Nodes it needs (and
    :attr:`name`, :attr:`allocatable`, :attr:`requested`, :attr:`pods`,
    :meth:`free` and :meth:`fits`, which need no decoding) decodes only
    those. :meth:`label`, :meth:`labels`, :meth:`unschedulable`,
    :meth:`taints`, :meth:`condition` and :meth:`ready` answer the usual
    questions from it::

        node = NodeInfo("n1", {"metadata": {"labels": {"zone": "a"}},
                               "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                        allocatable={"cpu": 2000}, requested={"cpu": 500})
        assert node.label("zone") == "a" and node.ready() and not node.unschedulable()
        assert node.free("cpu") == 1500
    """

    def __init__(
        self,
        name: str,
        node: Dict[str, Any],
        allocatable: Resources,
        requested: Resources,
        pods: int = 0,
    ) -> None:
        self.name = name
        """The Node's name."""
        self._node: Optional[Dict[str, Any]] = node
        self._json: Optional[bytes] = None
        # What the helpers read, taken from the Node once (a NodeInfo is
        # kept between decisions and asked at every one).
        self._labels: Optional[Dict[str, str]] = None
        self._conditions: Optional[Dict[str, Any]] = None
        self.allocatable = allocatable
        """Allocatable resources, in milli-units."""
        self.requested = requested
        """Requested by the Pods bound there (assumed ones included)."""
        self.pods = pods
        """How many Pods are bound there."""

    @property
    def node(self) -> Dict[str, Any]:
        """The ``v1`` Node (a dict) as the host hands it over: ``metadata``
        (name, uid, resourceVersion, generation, labels, annotations,
        creationTimestamp), ``spec``, and ``status``'s ``capacity``,
        ``allocatable`` and ``conditions``. Decoded on first use; raises
        :class:`Unschedulable` (``Node <name> does not decode: ...``) if the
        host's JSON does not decode, which ends the attempt with that
        reason unless the policy catches it."""
        node = self._node
        if node is None:
            try:
                node = _json.loads(self._json or b"")
            except ValueError as e:
                raise Unschedulable(f"Node {self.name} does not decode: {e}") from None
            if not isinstance(node, dict):
                raise Unschedulable(f"Node {self.name} does not decode: not an object")
            self._node = node
            self._json = None
        return node

    @node.setter
    def node(self, value: Dict[str, Any]) -> None:
        self._node = value
        self._json = None
        self._labels = None
        self._conditions = None

    def free(self, resource: str) -> int:
        """What is left of ``resource`` (allocatable minus requested), in
        milli-units; a resource the Node does not list has none."""
        return self.allocatable.get(resource, 0) - self.requested.get(resource, 0)

    def fits(self, needed: Resources) -> bool:
        """True if every resource ``needed`` lists fits in what is free."""
        return all(amount <= 0 or self.free(name) >= amount for name, amount in needed.items())

    def labels(self) -> Dict[str, str]:
        """The Node's labels (``metadata.labels``; empty if it has none)."""
        labels = self._labels
        if labels is None:
            labels = self._labels = (self.node.get("metadata") or {}).get("labels") or {}
        return labels

    def label(self, key: str) -> Optional[str]:
        """The value of a label of the Node."""
        labels = self._labels
        if labels is None:
            labels = self.labels()
        return labels.get(key)

    def unschedulable(self) -> bool:
        """True if the Node is cordoned (``spec.unschedulable``)."""
        return bool((self.node.get("spec") or {}).get("unschedulable"))

    def taints(self) -> List[Dict[str, Any]]:
        """The Node's taints (``spec.taints``: dicts with ``key``,
        ``value``, ``effect``; empty if it has none)."""
        return (self.node.get("spec") or {}).get("taints") or []

    def condition(self, type_: str) -> Optional[str]:
        """The status (``True``, ``False``, ``Unknown``) of the Node's
        condition of type ``type_`` (``Ready``, ``MemoryPressure``, ...),
        if it has one."""
        conditions = self._conditions
        if conditions is None:
            conditions = self._conditions = {}
            for c in (self.node.get("status") or {}).get("conditions") or []:
                if isinstance(c, dict):
                    conditions.setdefault(c.get("type"), c.get("status"))
        return conditions.get(type_)

    def ready(self) -> bool:
        """True if the Node's ``Ready`` condition is ``True``."""
        return self.condition("Ready") == "True"

    def untolerated_taint(self, pod: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The first of the Node's ``NoSchedule`` and ``NoExecute`` taints
        that ``pod`` does not :func:`tolerate <tolerates>`, if any: the
        taint that keeps the Pod off this Node, as kube-scheduler's
        ``TaintToleration`` filter finds it. ``PreferNoSchedule`` taints
        are a preference, not a filter, and never returned::

            node = NodeInfo("gpu1", {"spec": {"taints": [
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}, {}, {})
            assert node.untolerated_taint({"spec": {}})["key"] == "dedicated"
            gpu = {"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu"}]}}
            assert node.untolerated_taint(gpu) is None
        """
        for taint in self.taints():
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod, taint):
                return taint
        return None

    @staticmethod
    def _from_wit(n: _wit.NodeInfo) -> "NodeInfo":
        """The Node as the host hands it over, its JSON not decoded yet."""
        info = NodeInfo(
            name=n.name,
            node=None,  # type: ignore[arg-type]
            allocatable={r.name: r.milli for r in n.allocatable},
            requested={r.name: r.milli for r in n.requested},
            pods=n.pods,
        )
        info._json = n.node
        return info


class Unschedulable(Exception):
    """Why a Pod fits no Node now: raise it (or return it) from
    :meth:`Scheduler.schedule`. The host joins the reasons into the
    ``FailedScheduling`` Event and the ``PodScheduled`` condition, and tries
    again later and when Nodes change::

        raise Unschedulable("2 nodes have too little cpu", "1 node is cordoned")
    """

    def __init__(self, *reasons: str) -> None:
        super().__init__("; ".join(reasons))
        self.reasons: List[str] = list(reasons)
        """One reason per kind of misfit."""

    def _into_wit(self) -> _wit.Unschedulable:
        return _wit.Unschedulable(reasons=list(self.reasons))


class Scheduler(Component):
    """A scheduling policy. A fresh instance is made for every call."""

    cluster: str = "default"
    """The name of the cluster the Pod is in, set on the instance before
    :meth:`schedule` is called: ``default`` for the host's own cluster, else
    the name the host engaged it by. The Nodes are that cluster's."""

    def schedule(self, pod: Dict[str, Any], nodes: List[NodeInfo]) -> Union[str, Unschedulable]:
        """Picks the Node for ``pod`` among ``nodes`` (every Node the host
        knows, in name order) and returns its name; raises or returns
        :class:`Unschedulable` when the Pod fits nowhere now."""
        raise NotImplementedError("a scheduler must define schedule()")


_SUFFIXES = {"": 0, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([a-zA-Z]*|[eE][+-]?[0-9]+)$")


def parse_quantity(s: str) -> Optional[int]:
    """Parses a Kubernetes quantity (``500m``, ``2``, ``1.5``, ``128Mi``,
    ``1G``, ``1e3``) into milli-units, rounding up like ``MilliValue``.
    ``None`` when it is not a quantity or does not fit in 64 bits."""
    m = _QUANTITY.match(str(s).strip())
    if m is None:
        return None
    number, suffix = m.groups()
    try:
        value = float(number)
    except ValueError:
        return None
    if suffix in _BINARY:
        milli = value * 1024 ** _BINARY[suffix] * 1000
    elif suffix in _SUFFIXES:
        milli = value * 10.0 ** (_SUFFIXES[suffix] + 3)
    elif suffix[:1] in ("e", "E"):
        milli = value * 10.0 ** (int(suffix[1:]) + 3)
    else:
        return None
    if not math.isfinite(milli) or abs(milli) >= 9.2e18:
        return None
    return math.ceil(round(milli, 6))


def tolerates(pod: Dict[str, Any], taint: Dict[str, Any]) -> bool:
    """True if one of the Pod's tolerations (``spec.tolerations``)
    tolerates ``taint`` (a dict with ``key``, ``value``, ``effect``),
    matched as Kubernetes matches them: a toleration's ``effect``, when
    set, must be the taint's; its ``key``, when set, must be the taint's;
    operator ``Exists`` then matches any value, and ``Equal`` (or no
    operator) only the taint's value. So ``{"operator": "Exists"}`` with no
    key and no effect tolerates every taint. Any other operator (the alpha
    ``Lt`` and ``Gt``, off by default in kube-scheduler) tolerates nothing.

    It also answers whether a Pod may go where a Node's state would put a
    taint: kube-scheduler lets a Pod onto a cordoned Node if it tolerates
    ``node.kubernetes.io/unschedulable:NoSchedule``::

        cordon = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
        pod = {"spec": {"tolerations": [{"key": cordon["key"], "operator": "Exists"}]}}
        assert tolerates(pod, cordon)
    """
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    return any(_toleration_matches(t, taint) for t in tolerations if isinstance(t, dict))


def _toleration_matches(toleration: Dict[str, Any], taint: Dict[str, Any]) -> bool:
    """Whether one toleration tolerates one taint (Kubernetes'
    ``Toleration.ToleratesTaint``, comparison operators off)."""
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or ""
    if operator in ("", "Equal"):
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return operator == "Exists"


def _requests(container: Dict[str, Any]) -> Resources:
    requests = (container.get("resources") or {}).get("requests") or {}
    return {name: parse_quantity(q) or 0 for name, q in requests.items()}


def pod_requests(pod: Dict[str, Any]) -> Resources:
    """What a Pod requests: the sum over its containers, or the largest of
    its init containers where that is more (as kube-scheduler counts), plus
    its overhead; ``pods`` is always 1000 (one Pod)."""
    total: Resources = {}
    spec = pod.get("spec")
    if not spec:
        return total
    for c in spec.get("containers") or []:
        for name, amount in _requests(c).items():
            total[name] = total.get(name, 0) + amount
    for c in spec.get("initContainers") or []:
        for name, amount in _requests(c).items():
            total[name] = max(total.get(name, 0), amount)
    for name, q in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + (parse_quantity(q) or 0)
    total["pods"] = 1000
    return total


def _unschedulable(reasons: Iterable[str]) -> Err[_wit.Unschedulable]:
    return Err(_wit.Unschedulable(reasons=list(reasons)))


class _Held:
    """The Nodes one instance holds for one cluster: the host hands each
    instance every Node once, then only what changed (``schedule-request``)."""

    def __init__(self) -> None:
        self.by_name: Dict[str, NodeInfo] = {}
        self.order: Optional[List[NodeInfo]] = None
        """Every Node in name order; rebuilt when one is added or goes."""
        self.index: Dict[str, int] = {}
        """Each Node's place in :attr:`order`."""

    def apply(self, removed: Iterable[str], nodes: Iterable[_wit.NodeInfo]) -> None:
        """Applies one request's changes: ``removed`` go, ``nodes`` are
        added or replace the entry of the same name."""
        for name in removed:
            if self.by_name.pop(name, None) is not None:
                self.order = None
        for n in nodes:
            info = NodeInfo._from_wit(n)
            known = n.name in self.by_name
            self.by_name[n.name] = info
            if not known:
                self.order = None
            elif self.order is not None:
                self.order[self.index[n.name]] = info

    def nodes(self) -> List[NodeInfo]:
        """Every Node held, in name order."""
        if self.order is None:
            names = sorted(self.by_name)
            self.order = [self.by_name[name] for name in names]
            self.index = {name: i for i, name in enumerate(names)}
        return self.order


_held: Dict[str, _Held] = {}
"""What this instance holds, per cluster."""


def run_schedule(scheduler: Type[Scheduler], request: _wit.ScheduleRequest) -> str:
    """Applies the request's changes to the Nodes this instance holds,
    decodes the Pod and calls ``schedule`` with every Node held (each
    decoded when the policy first reads it, once per change); raises
    ``Err`` with the reasons a Pod is unschedulable (an exception is one)."""
    # The changes first: the host counts them handed over whatever this
    # attempt answers.
    held = _held.get(request.cluster)
    if held is None:
        held = _held[request.cluster] = _Held()
    held.apply(request.removed, request.nodes)
    try:
        pod = _json.loads(request.pod)
    except ValueError as e:
        raise _unschedulable([f"the Pod does not decode: {e}"]) from None
    # A copy: the policy may sort or filter the list it gets.
    nodes = list(held.nodes())
    instance = scheduler()
    instance.cluster = request.cluster
    try:
        picked = instance.schedule(pod, nodes)
    except Unschedulable as e:
        raise Err(e._into_wit()) from None
    except Exception as e:  # noqa: BLE001 - a bug in the scheduler must not trap the host call
        log.error("unhandled exception in schedule", error=repr(e), traceback=format_exc())
        raise _unschedulable([f"unhandled {type(e).__name__}: {e}"]) from None
    if isinstance(picked, Unschedulable):
        raise Err(picked._into_wit())
    if not isinstance(picked, str) or not picked:
        raise _unschedulable([f"schedule returned {picked!r}, not a Node name"])
    return picked
