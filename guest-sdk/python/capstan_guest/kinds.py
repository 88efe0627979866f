"""Naming kinds the way Kubernetes objects do: an ``apiVersion``
(``apps/v1``, or ``v1`` for the core group) and a ``kind``."""

from __future__ import annotations

from dataclasses import dataclass

from wit_world.imports import capstan_operator_types as _wit


@dataclass(frozen=True)
class GroupVersionKind:
    """A kind in one version of its API group, e.g. what an admission
    request is about::

        GroupVersionKind("apps", "v1", "Deployment").api_version == "apps/v1"
    """

    group: str
    """The API group, ``""`` for the core group."""
    version: str
    """The version, e.g. ``v1``."""
    kind: str
    """The kind, e.g. ``Deployment``."""

    @property
    def api_version(self) -> str:
        """``group/version``, or the version alone for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @staticmethod
    def of(api_version: str, kind: str) -> "GroupVersionKind":
        """The kind named by an ``apiVersion`` and a ``kind``:
        ``GroupVersionKind.of("v1", "ConfigMap")``."""
        group, _, version = api_version.rpartition("/")
        return GroupVersionKind(group, version, kind)

    @staticmethod
    def _from_wit(g: _wit.GroupVersionKind) -> "GroupVersionKind":
        return GroupVersionKind(g.group, g.version, g.kind)


def gvk(api_version: str, kind: str) -> _wit.GroupVersionKind:
    """The group, version and kind named by ``api_version`` and ``kind``:
    ``gvk("apps/v1", "Deployment")`` is group ``apps``, version ``v1``;
    ``gvk("v1", "ConfigMap")`` is the core group ``""``."""
    group, _, version = api_version.rpartition("/")
    return _wit.GroupVersionKind(group=group, version=version, kind=kind)


def object_ref(api_version: str, kind: str, namespace: str | None, name: str) -> _wit.ObjectRef:
    """A reference to one object."""
    return _wit.ObjectRef(kind=gvk(api_version, kind), namespace=namespace, name=name)
