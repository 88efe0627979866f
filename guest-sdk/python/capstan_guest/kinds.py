"""Naming kinds the way Kubernetes objects do: an ``apiVersion``
(``apps/v1``, or ``v1`` for the core group) and a ``kind``."""

from __future__ import annotations

from wit_world.imports import types as _wit


def gvk(api_version: str, kind: str) -> _wit.GroupVersionKind:
    """The group, version and kind named by ``api_version`` and ``kind``:
    ``gvk("apps/v1", "Deployment")`` is group ``apps``, version ``v1``;
    ``gvk("v1", "ConfigMap")`` is the core group ``""``."""
    group, _, version = api_version.rpartition("/")
    return _wit.GroupVersionKind(group=group, version=version, kind=kind)


def object_ref(api_version: str, kind: str, namespace: str | None, name: str) -> _wit.ObjectRef:
    """A reference to one object."""
    return _wit.ObjectRef(kind=gvk(api_version, kind), namespace=namespace, name=name)
