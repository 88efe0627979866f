"""What a controller declares: the :class:`Manifest` builder.

Example::

    Manifest("web")
        .primary("apps/v1", "Deployment")
        .owns("v1", "ConfigMap")
        .owns("batch/v1", "Job", label_selector="app.kubernetes.io/managed-by=web")
        .watches(Watch("v1", "Secret", Mapping.label("app")))
        .watches(Watch("v1", "ConfigMap", Mapping.reference(Field.annotation("example.com/owner"))))
        .permission(Permission("rbac.authorization.k8s.io", "ClusterRole", [Verb.BIND]).scope(Scope.CLUSTER).names("view"))
        .finalizer("example.com/cleanup")
        .resync(600)
        .max_concurrency(4)
        .egress("https://api.example.com")

A fleet controller (primary objects in one cluster, children in others)::

    Manifest("spreader").primary("example.com/v1", "Spread").owns("v1", "ConfigMap").fleet(home="default")
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterable, Mapping as MappingType, Optional, Union

from wit_world.imports import capstan_operator_types as _wit

from .kinds import gvk

if TYPE_CHECKING:
    from .admission import Webhook


class Verb(Enum):
    """A Kubernetes API verb, as in RBAC rules."""

    GET = "get"
    """Read one object."""
    LIST = "list"
    """Read many objects."""
    WATCH = "watch"
    """Watch for changes."""
    CREATE = "create"
    """Create objects."""
    UPDATE = "update"
    """Replace objects."""
    PATCH = "patch"
    """Patch objects, including server-side apply."""
    DELETE = "delete"
    """Delete objects."""
    BIND = "bind"
    """Bind a Role or ClusterRole in a (Cluster)RoleBinding without holding
    its permissions (RBAC only: declare it on kind ``ClusterRole`` or
    ``Role`` of group ``rbac.authorization.k8s.io``, best with
    :meth:`Permission.names`)."""
    ESCALATE = "escalate"
    """Create or update a Role or ClusterRole with permissions the host
    does not hold (RBAC only)."""

    def _into_wit(self) -> _wit.Verb:
        return _wit.Verb[self.name]


ALL_VERBS: tuple[Verb, ...] = (Verb.GET, Verb.LIST, Verb.WATCH, Verb.CREATE, Verb.UPDATE, Verb.PATCH, Verb.DELETE)
"""Every API verb: get, list, watch, create, update, patch, delete (not
the RBAC-only :attr:`Verb.BIND` and :attr:`Verb.ESCALATE`)."""
READ_VERBS: tuple[Verb, ...] = (Verb.GET, Verb.LIST, Verb.WATCH)
"""The read-only verbs: get, list, watch."""


class Scope:
    """Where a permission applies: :attr:`CLUSTER`, :attr:`OWN_NAMESPACE`
    (the default) or :meth:`namespaces`."""

    CLUSTER: "Scope"
    """Every namespace, and cluster-scoped objects."""
    OWN_NAMESPACE: "Scope"
    """The namespace of the object being reconciled (for a cluster-scoped
    primary, cluster-scoped objects only)."""

    def __init__(self, wit: _wit.Scope) -> None:
        self._wit = wit

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Scope) and self._wit == other._wit

    def __repr__(self) -> str:
        return f"Scope({self._wit!r})"

    @staticmethod
    def namespaces(names: Iterable[str]) -> "Scope":
        """Only these namespaces."""
        return Scope(_wit.Scope_Namespaces(list(names)))


Scope.CLUSTER = Scope(_wit.Scope_Cluster())
Scope.OWN_NAMESPACE = Scope(_wit.Scope_OwnNamespace())


class Permission:
    """One permission: verbs on a kind, within a scope::

        Permission("", "Secret", READ_VERBS).scope(Scope.OWN_NAMESPACE)

    ``group`` is the API group (``""`` for the core group, ``*`` for all);
    ``kind`` may be ``*``. :meth:`names` limits it to objects with these
    names (RBAC ``resourceNames``)::

        Permission("rbac.authorization.k8s.io", "ClusterRole", [Verb.BIND]).scope(Scope.CLUSTER).names("view")
    """

    def __init__(self, group: str, kind: str, verbs: Iterable[Verb]) -> None:
        self._wit = _wit.Permission(
            group=group,
            kind=kind,
            verbs=[v._into_wit() for v in verbs],
            scope=_wit.Scope_OwnNamespace(),
            status=False,
            resource_names=[],
        )

    def names(self, *names: Union[str, Iterable[str]]) -> "Permission":
        """Only the objects with these names (RBAC ``resourceNames``), given
        as arguments or as one list; replaces names set before. Not for
        ``list``, ``watch`` or ``create``, which RBAC cannot limit by
        name."""
        flat: list[str] = []
        for n in names:
            if isinstance(n, str):
                flat.append(n)
            else:
                flat.extend(n)
        self._wit.resource_names = flat
        return self

    def scope(self, scope: Scope) -> "Permission":
        """Sets where the permission applies (default: the reconciled
        object's namespace)."""
        self._wit.scope = scope._wit
        return self

    def with_status(self) -> "Permission":
        """Also allows the ``status`` subresource with the same verbs."""
        self._wit.status = True
        return self


class Field:
    """Where a :meth:`Mapping.reference` reads a value on a watched object:
    :attr:`NAME`, :attr:`NAMESPACE`, :meth:`label` or :meth:`annotation`."""

    NAME: "Field"
    """The watched object's own name."""
    NAMESPACE: "Field"
    """The watched object's own namespace (nothing is triggered for a
    cluster-scoped object)."""

    def __init__(self, wit: _wit.FieldRef) -> None:
        self._wit = wit

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Field) and self._wit == other._wit

    def __repr__(self) -> str:
        return f"Field({self._wit!r})"

    @staticmethod
    def label(key: str) -> "Field":
        """The value of this label."""
        return Field(_wit.FieldRef_Label(key))

    @staticmethod
    def annotation(key: str) -> "Field":
        """The value of this annotation."""
        return Field(_wit.FieldRef_Annotation(key))


Field.NAME = Field(_wit.FieldRef_Name())
Field.NAMESPACE = Field(_wit.FieldRef_Namespace())


class Mapping:
    """How a change to a watched object maps to primary objects to
    reconcile: :attr:`NONE`, :meth:`label`, :attr:`SAME_NAME`,
    :attr:`NAMESPACE`, :meth:`reference` or :attr:`ALL`.

    For a cluster-scoped primary "in the same namespace" is dropped:
    :meth:`label` and :attr:`SAME_NAME` name a cluster-scoped primary, and
    :attr:`NAMESPACE` triggers every primary object."""

    NONE: "Mapping"
    """Trigger nothing: cache the kind for reads."""
    SAME_NAME: "Mapping"
    """The primary object in the same namespace with the same name."""
    NAMESPACE: "Mapping"
    """Every primary object in the same namespace."""
    ALL: "Mapping"
    """Every primary object."""

    def __init__(self, wit: _wit.WatchMapping) -> None:
        self._wit = wit

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._wit == other._wit

    def __repr__(self) -> str:
        return f"Mapping({self._wit!r})"

    @staticmethod
    def label(key: str) -> "Mapping":
        """The primary object in the same namespace named by this label's
        value."""
        return Mapping(_wit.WatchMapping_Label(key))

    @staticmethod
    def reference(name: Field, namespace: Optional[Field] = None) -> "Mapping":
        """The primary object whose name is read at ``name`` on the watched
        object, and, for a namespaced primary, whose namespace is read at
        ``namespace`` (``None``: the watched object's own namespace). Maps
        any object, namespaced or not, to any primary, namespaced or not::

            # a cluster-scoped ClusterRoleBinding names its Team in two labels
            Mapping.reference(Field.label("example.com/team"), Field.label("example.com/team-namespace"))
        """
        if not isinstance(name, Field) or (namespace is not None and not isinstance(namespace, Field)):
            raise TypeError("Mapping.reference takes Field values (Field.NAME, Field.label(key), ...)")
        return Mapping(
            _wit.WatchMapping_Reference(
                _wit.Reference(name=name._wit, namespace=None if namespace is None else namespace._wit)
            )
        )


Mapping.NONE = Mapping(_wit.WatchMapping_None_())
Mapping.SAME_NAME = Mapping(_wit.WatchMapping_SameName())
Mapping.NAMESPACE = Mapping(_wit.WatchMapping_Namespace())
Mapping.ALL = Mapping(_wit.WatchMapping_All())


class Watch:
    """A kind watched besides the primary and owned kinds; a change
    triggers the primary objects ``mapping`` names. Read access (get, list,
    watch) is granted with it."""

    def __init__(self, api_version: str, kind: str, mapping: Mapping) -> None:
        self._wit = _wit.Watch(kind=gvk(api_version, kind), mapping=mapping._wit, label_selector=None)

    def label_selector(self, selector: str) -> "Watch":
        """Only watches objects matching a label selector."""
        self._wit.label_selector = selector
        return self


def _names(what: str, names: Iterable[Union[str, Iterable[str]]]) -> list[str]:
    """Cluster names given as arguments or lists, flattened; raises
    ``TypeError`` for anything but strings."""
    flat: list[str] = []
    for n in names:
        if not isinstance(n, str) and not hasattr(n, "__iter__"):
            raise TypeError(f"{what} are cluster names (str), not {type(n).__name__}")
        for name in [n] if isinstance(n, str) else n:
            if not isinstance(name, str):
                raise TypeError(f"{what} are cluster names (str), not {type(name).__name__}")
            flat.append(name)
    return flat


def _seconds(value: Union[float, timedelta]) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class Manifest:
    """What a component declares about itself; built in
    :meth:`Controller.manifest <capstan_guest.Controller.manifest>` (or, for
    a component without a controller, in the ``manifest`` of its first role
    class). Besides the controller's kinds and grants it names the roles
    served: :meth:`webhook`, :meth:`converts`, :meth:`scheduler`."""

    def __init__(self, name: str) -> None:
        """A manifest for a controller named ``name`` (a DNS-1123 label,
        unique in one host). Set the primary kind with :meth:`primary`."""
        self._roles = _wit.Roles(reconcile=False, admission=[], conversion=[], scheduler=None)
        self._egress: list[str] = []
        self._clusters: list[str] = []
        self._fleet: Optional[_wit.Fleet] = None
        self._wit = _wit.ControllerManifest(
            name=name,
            primary=_wit.GroupVersionKind(group="", version="", kind=""),
            crds=[],
            owns=[],
            watches=[],
            finalizer=None,
            permissions=[],
            resync_seconds=None,
            max_concurrency=1,
        )

    def primary(self, api_version: str, kind: str) -> "Manifest":
        """The kind this controller reconciles."""
        self._wit.primary = gvk(api_version, kind)
        return self

    def crd(self, crd: Union[MappingType[str, Any], str, bytes]) -> "Manifest":
        """A CustomResourceDefinition this controller defines: a full
        ``apiextensions.k8s.io/v1`` object, as a dict or as JSON text."""
        if isinstance(crd, str):
            crd = crd.encode()
        self._wit.crds.append(crd if isinstance(crd, bytes) else json.dumps(crd).encode())
        return self

    def owns(
        self,
        api_version: str,
        kind: str,
        label_selector: Optional[str] = None,
        scope: Optional[Scope] = None,
    ) -> "Manifest":
        """A kind of child objects this controller creates.

        ``label_selector``: only children matching it are watched, cached
        and pruned, and every child an outcome lists must match it.
        ``scope``: where children of this kind may be written; by default
        the reconciled object's namespace (cluster-scoped children only,
        for a cluster-scoped primary). A cluster-scoped primary with
        namespaced children gives :attr:`Scope.CLUSTER` or
        :meth:`Scope.namespaces`::

            .owns("v1", "ConfigMap", label_selector="example.com/tenant", scope=Scope.CLUSTER)
        """
        if scope is not None and not isinstance(scope, Scope):
            raise TypeError(f"scope must be a Scope, not {type(scope).__name__}")
        self._wit.owns.append(
            _wit.Owned(
                kind=gvk(api_version, kind),
                label_selector=label_selector,
                scope=None if scope is None else scope._wit,
            )
        )
        return self

    def watches(self, watch: Watch) -> "Manifest":
        """Another kind this controller reads or reacts to."""
        self._wit.watches.append(watch._wit)
        return self

    def finalizer(self, name: str) -> "Manifest":
        """A finalizer the host adds to primary objects, so that ``delete``
        is delivered before they go away, e.g. ``example.com/cleanup``."""
        self._wit.finalizer = name
        return self

    def permission(self, permission: Permission) -> "Manifest":
        """A permission beyond those the primary, owned and watched kinds
        imply."""
        self._wit.permissions.append(permission._wit)
        return self

    def resync(self, every: Union[float, timedelta]) -> "Manifest":
        """Reconcile every object at least this often: seconds, or a
        ``timedelta`` (rounded up to whole seconds)."""
        self._wit.resync_seconds = min(math.ceil(_seconds(every)), 2**32 - 1)
        return self

    def max_concurrency(self, n: int) -> "Manifest":
        """At most ``n`` reconciles in flight at once (1, the default, to
        64)."""
        self._wit.max_concurrency = max(1, min(n, 2**32 - 1))
        return self

    def webhook(self, webhook: "Webhook") -> "Manifest":
        """An admission webhook this component serves (see
        :class:`~capstan_guest.Admission`)::

            .webhook(Webhook.validating("validate.greetings.example.com").kind("example.com/v1", "Greeting"))
        """
        self._roles.admission.append(webhook._wit)
        return self

    def converts(self, api_version: str, kind: str) -> "Manifest":
        """This component converts the CRD of ``kind`` (in the group of
        ``api_version``) between its versions (see
        :class:`~capstan_guest.Conversion`); the CRD must be one of
        :meth:`crd`, with two or more versions."""
        group = gvk(api_version, kind).group
        self._roles.conversion.append(_wit.GroupKind(group=group, kind=kind))
        return self

    def scheduler(self, name: str) -> "Manifest":
        """This component schedules the Pods whose ``spec.schedulerName`` is
        ``name`` (see :class:`~capstan_guest.Scheduler`)."""
        self._roles.scheduler = _wit.SchedulerManifest(name=name)
        return self

    def egress(self, *origins: Union[str, Iterable[str]]) -> "Manifest":
        """Origins the component may call over HTTP(S) (see
        :mod:`capstan_guest.http`), given as arguments or as one list; adds
        to those declared before. The host refuses every other request
        before it connects; none is declared by default.

        Each origin is ``SCHEME://HOST[:PORT]``: scheme ``http`` or
        ``https``; host a DNS name, ``*.`` and a domain for any name below
        it, or an IP address (IPv6 in brackets); port a number or a range
        ``LOW-HIGH``, the scheme's default when left out. No path, query,
        user or bare ``*``; the host checks them when it loads the
        component::

            .egress("https://api.example.com", "http://alertmanager.monitoring.svc:9093")
        """
        for o in origins:
            if isinstance(o, str):
                self._egress.append(o)
            else:
                self._egress.extend(o)
        return self

    def clusters(self, *names: Union[str, Iterable[str]]) -> "Manifest":
        """The clusters a uniform controller runs in, by the names the host
        engaged them by (``default`` for the host's own), given as
        arguments or as one list; adds to those declared before. None
        declared (the default): every cluster the host serves. A fleet
        controller (:meth:`fleet`) runs in its home only, and the host
        ignores these::

            .clusters("default", "eu-west")
        """
        self._clusters.extend(_names("clusters", names))
        return self

    def fleet(self, home: str = "default", members: Union[str, Iterable[str], None] = None) -> "Manifest":
        """Makes the component a fleet controller: it reconciles the primary
        objects of the cluster ``home`` (``default``: the host's own) and
        no other's, places children in the ``members`` with
        :meth:`Outcome.child_in <capstan_guest.Outcome.child_in>` and
        reads there with :meth:`Context.api_in
        <capstan_guest.Context.api_in>`. ``members`` empty or left out:
        every cluster the host serves but ``home``. The members engaged at
        a call are :attr:`Context.members <capstan_guest.Context.members>`.
        The host checks the names when it loads the component::

            .fleet(home="default", members=["eu-west", "us-east"])
        """
        if not isinstance(home, str):
            raise TypeError(f"fleet home must be a cluster name (str), not {type(home).__name__}")
        self._fleet = _wit.Fleet(home=home, members=_names("fleet members", () if members is None else (members,)))
        return self

    def _into_wit(self) -> _wit.ControllerManifest:
        return self._wit

    def _into_component(self, reconcile: bool) -> _wit.ComponentManifest:
        """The contract's record. Without a primary kind, the component is
        about ``v1`` ``Pod`` when it schedules, else about the first kind
        its webhooks check or the first CRD it converts."""
        self._roles.reconcile = reconcile
        if not self._wit.primary.kind:
            if self._roles.scheduler is not None:
                self._wit.primary = gvk("v1", "Pod")
            elif any(w.kinds for w in self._roles.admission):
                first = next(w.kinds[0] for w in self._roles.admission if w.kinds)
                self._wit.primary = _wit.GroupVersionKind(group=first.group, version=first.version, kind=first.kind)
            elif self._roles.conversion:
                gk = self._roles.conversion[0]
                version = self._crd_version(gk.kind)
                self._wit.primary = _wit.GroupVersionKind(group=gk.group, version=version, kind=gk.kind)
        return _wit.ComponentManifest(
            controller=self._wit,
            roles=self._roles,
            egress=list(self._egress),
            clusters=list(self._clusters),
            fleet=None if self._fleet is None else _wit.Fleet(home=self._fleet.home, members=list(self._fleet.members)),
        )

    def _crd_version(self, kind: str) -> str:
        """The first version of the declared CRD of ``kind``, or ``""``."""
        for data in self._wit.crds:
            try:
                crd = json.loads(data)
                if crd["spec"]["names"]["kind"] == kind:
                    return str(crd["spec"]["versions"][0]["name"])
            except (ValueError, KeyError, IndexError, TypeError):
                continue
        return ""

