"""What a controller declares: the :class:`Manifest` builder.

Example::

    Manifest("web")
        .primary("apps/v1", "Deployment")
        .owns("v1", "ConfigMap")
        .watches(Watch("v1", "Secret", Mapping.label("app")))
        .finalizer("example.com/cleanup")
        .resync(600)
        .max_concurrency(4)
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from enum import Enum
from typing import Any, Iterable, Mapping as MappingType, Optional, Union

from wit_world.imports import types as _wit

from .kinds import gvk


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

    def _into_wit(self) -> _wit.Verb:
        return _wit.Verb[self.name]


ALL_VERBS: tuple[Verb, ...] = tuple(Verb)
"""Every verb."""
READ_VERBS: tuple[Verb, ...] = (Verb.GET, Verb.LIST, Verb.WATCH)
"""The read-only verbs: get, list, watch."""


class Scope:
    """Where a permission applies: :attr:`CLUSTER`, :attr:`OWN_NAMESPACE`
    (the default) or :meth:`namespaces`."""

    CLUSTER: "Scope"
    """Every namespace, and cluster-scoped kinds."""
    OWN_NAMESPACE: "Scope"
    """Only the namespace of the object being reconciled."""

    def __init__(self, wit: _wit.Scope) -> None:
        self._wit = wit

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
    ``kind`` may be ``*``.
    """

    def __init__(self, group: str, kind: str, verbs: Iterable[Verb]) -> None:
        self._wit = _wit.Permission(
            group=group,
            kind=kind,
            verbs=[v._into_wit() for v in verbs],
            scope=_wit.Scope_OwnNamespace(),
            status=False,
        )

    def scope(self, scope: Scope) -> "Permission":
        """Sets where the permission applies (default: the reconciled
        object's namespace)."""
        self._wit.scope = scope._wit
        return self

    def with_status(self) -> "Permission":
        """Also allows the ``status`` subresource with the same verbs."""
        self._wit.status = True
        return self


class Mapping:
    """How a change to a watched object maps to primary objects to
    reconcile: :attr:`NONE`, :meth:`label`, :attr:`SAME_NAME` or
    :attr:`NAMESPACE`."""

    NONE: "Mapping"
    """Trigger nothing: cache the kind for reads."""
    SAME_NAME: "Mapping"
    """The primary object in the same namespace with the same name."""
    NAMESPACE: "Mapping"
    """Every primary object in the same namespace."""

    def __init__(self, wit: _wit.WatchMapping) -> None:
        self._wit = wit

    @staticmethod
    def label(key: str) -> "Mapping":
        """The primary object in the same namespace named by this label's
        value."""
        return Mapping(_wit.WatchMapping_Label(key))


Mapping.NONE = Mapping(_wit.WatchMapping_None_())
Mapping.SAME_NAME = Mapping(_wit.WatchMapping_SameName())
Mapping.NAMESPACE = Mapping(_wit.WatchMapping_Namespace())


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


def _seconds(value: Union[float, timedelta]) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class Manifest:
    """What a controller declares about itself; built in
    :meth:`Controller.manifest <capstan_guest.Controller.manifest>`."""

    def __init__(self, name: str) -> None:
        """A manifest for a controller named ``name`` (a DNS-1123 label,
        unique in one host). Set the primary kind with :meth:`primary`."""
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

    def owns(self, api_version: str, kind: str) -> "Manifest":
        """A kind of child objects this controller creates."""
        self._wit.owns.append(gvk(api_version, kind))
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
        """At most ``n`` reconciles in flight at once (minimum 1, the
        default)."""
        self._wit.max_concurrency = max(1, min(n, 2**32 - 1))
        return self

    def _into_wit(self) -> _wit.ControllerManifest:
        return self._wit

