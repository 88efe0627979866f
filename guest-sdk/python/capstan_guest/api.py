"""The Kubernetes client: :class:`Api`, made by
:meth:`Context.api <capstan_guest.Context.api>` (or, to read in another
cluster of a fleet, :meth:`Context.api_in
<capstan_guest.Context.api_in>`). Objects are plain dicts
(parsed JSON); every call goes through the host, which checks it against
the controller's grants, and raises an :class:`~capstan_guest.ApiError`
subclass on failure."""

from __future__ import annotations

from enum import Enum
from typing import Any, Callable, Dict, List, Mapping, Optional, TypeVar

from componentize_py_types import Err
from wit_world.imports import kube as _kube
from wit_world.imports import capstan_operator_types as _wit

from . import _json, errors
from .kinds import gvk

T = TypeVar("T")


class PatchType(Enum):
    """Patch formats for :meth:`Api.patch` and :meth:`Api.patch_status`."""

    MERGE = "merge"
    """RFC 7386 JSON merge patch (a dict)."""
    JSON = "json"
    """RFC 6902 JSON patch (a list of operations)."""
    STRATEGIC = "strategic"
    """Kubernetes strategic merge patch (built-in kinds only)."""

    def _into_wit(self) -> _kube.PatchType:
        return _kube.PatchType[self.name]


class Propagation(Enum):
    """How dependents are treated by :meth:`Api.delete`."""

    DEFAULT = "default"
    """The API server's default for the kind."""
    BACKGROUND = "background"
    """Delete dependents in the background."""
    FOREGROUND = "foreground"
    """Delete dependents first."""
    ORPHAN = "orphan"
    """Leave dependents in place."""

    def _into_wit(self) -> _kube.Propagation:
        return _kube.Propagation[self.name]


def _status(s: _kube.Status) -> errors.ApiStatus:
    return errors.ApiStatus(code=s.code, reason=s.reason, message=s.message)


def api_error(error: _kube.Error) -> errors.ApiError:
    """The :class:`~capstan_guest.ApiError` for an error of the ``kube``
    interface."""
    if isinstance(error, _kube.Error_Denied):
        return errors.Denied(error.value)
    if isinstance(error, _kube.Error_BadRequest):
        return errors.BadRequest(error.value)
    if isinstance(error, _kube.Error_Unavailable):
        return errors.Unavailable(error.value)
    cls = {
        _kube.Error_NotFound: errors.NotFound,
        _kube.Error_AlreadyExists: errors.AlreadyExists,
        _kube.Error_Conflict: errors.Conflict,
        _kube.Error_Invalid: errors.Invalid,
        _kube.Error_Forbidden: errors.Forbidden,
    }.get(type(error), errors.OtherApiError)
    status = _status(error.value)
    return cls(status.message, status)


def call(function: Callable[..., T], *args: Any) -> T:
    """Calls a host import that returns ``result<_, kube.error>``, raising
    the matching :class:`~capstan_guest.ApiError`."""
    try:
        return function(*args)
    except Err as e:
        raise api_error(e.value) from None


def _decode(data: bytes) -> Dict[str, Any]:
    try:
        value = _json.loads(data)
    except ValueError as e:
        raise errors.Decode(str(e)) from None
    if not isinstance(value, dict):
        raise errors.Decode(f"expected a JSON object, got {type(value).__name__}")
    return value


def _encode(value: Any) -> bytes:
    try:
        return _json.dumps(value)
    except (TypeError, ValueError) as e:
        raise errors.BadRequest(str(e)) from None


class Api:
    """A client for one kind in one namespace (``None``: all namespaces for
    :meth:`list`, or a cluster-scoped kind)::

        deployments = ctx.api("apps/v1", "Deployment", ctx.namespace)
        web = deployments.get_opt("web")

    One made with a ``cluster`` (:meth:`Context.api_in
    <capstan_guest.Context.api_in>`) reads in that cluster: :meth:`get`,
    :meth:`get_opt` and :meth:`list` work, and every write raises
    :class:`~capstan_guest.Denied` without calling the host (a fleet
    controller writes in its members through :meth:`Outcome.child_in
    <capstan_guest.Outcome.child_in>`).
    """

    def __init__(
        self, api_version: str, kind: str, namespace: Optional[str] = None, *, cluster: Optional[str] = None
    ) -> None:
        """Prefer :meth:`Context.api <capstan_guest.Context.api>` and
        :meth:`Context.api_in <capstan_guest.Context.api_in>`."""
        self.api_version: str = api_version
        """The kind's ``apiVersion``, e.g. ``apps/v1``."""
        self.kind: str = kind
        """The kind, e.g. ``Deployment``."""
        self.namespace: Optional[str] = namespace
        """The namespace calls address, if any."""
        self.cluster: Optional[str] = cluster
        """The cluster reads address (``kube.get-in``, ``kube.list-in``),
        writes refused; ``None``: the request's own cluster, read and
        written with ``kube.get``, ``kube.create``, ..."""
        self._gvk = gvk(api_version, kind)

    def __repr__(self) -> str:
        cluster = "" if self.cluster is None else f", cluster={self.cluster!r}"
        return f"Api({self.api_version!r}, {self.kind!r}, {self.namespace!r}{cluster})"

    def _writable(self, method: str) -> None:
        """Raises :class:`~capstan_guest.Denied` for a write through an Api
        of another cluster: the contract has no writes there."""
        if self.cluster is not None:
            raise errors.Denied(
                f"Api.{method} of {self.kind} in cluster {self.cluster!r}: an Api from ctx.api_in only reads; "
                "a fleet controller writes in member clusters through Outcome.child_in"
            )

    def _ref(self, name: str) -> _wit.ObjectRef:
        return _wit.ObjectRef(kind=self._gvk, namespace=self.namespace, name=name)

    def _object(self, obj: Mapping[str, Any]) -> bytes:
        """``obj`` as JSON, with this Api's apiVersion, kind and namespace
        filled in where unset."""
        # Copies of the top level and the metadata only: the rest is
        # encoded as it is, and the caller's dicts are not changed.
        value = dict(obj)
        value.setdefault("apiVersion", self.api_version)
        value.setdefault("kind", self.kind)
        if self.namespace is not None:
            if "metadata" not in value:
                value["metadata"] = {"namespace": self.namespace}
            elif isinstance(value["metadata"], dict) and "namespace" not in value["metadata"]:
                value["metadata"] = {**value["metadata"], "namespace": self.namespace}
        return _encode(value)

    def get(self, name: str) -> Dict[str, Any]:
        """Reads one object.

        Raises :class:`~capstan_guest.NotFound` if it does not exist; any
        other :class:`~capstan_guest.ApiError` (:class:`~capstan_guest.Denied`
        for a cluster the request may not read in)."""
        if self.cluster is not None:
            return _decode(call(_kube.get_in, self.cluster, self._ref(name)))
        return _decode(call(_kube.get, self._ref(name)))

    def get_opt(self, name: str) -> Optional[Dict[str, Any]]:
        """Reads one object, ``None`` if it does not exist.

        Raises any :class:`~capstan_guest.ApiError` but
        :class:`~capstan_guest.NotFound`."""
        try:
            return self.get(name)
        except errors.NotFound:
            return None

    def list(self, label_selector: Optional[str] = None, field_selector: Optional[str] = None) -> List[Dict[str, Any]]:
        """Lists objects, optionally by label selector (``app=web,tier!=db``)
        and field selector (``metadata.name=x``).

        Raises any :class:`~capstan_guest.ApiError`."""
        params = _kube.ListParams(label_selector=label_selector, field_selector=field_selector)
        if self.cluster is not None:
            return [_decode(item) for item in call(_kube.list_in, self.cluster, self._gvk, self.namespace, params)]
        return [_decode(item) for item in call(_kube.list, self._gvk, self.namespace, params)]

    def create(self, obj: Mapping[str, Any]) -> Dict[str, Any]:
        """Creates an object; returns it as stored.

        Raises :class:`~capstan_guest.AlreadyExists`; any other
        :class:`~capstan_guest.ApiError`."""
        self._writable("create")
        return _decode(call(_kube.create, self._object(obj)))

    def replace(self, obj: Mapping[str, Any]) -> Dict[str, Any]:
        """Replaces an object; its ``metadata.resourceVersion``, if set, is
        a precondition.

        Raises :class:`~capstan_guest.Conflict` on a stale resourceVersion;
        any other :class:`~capstan_guest.ApiError`."""
        self._writable("replace")
        return _decode(call(_kube.replace, self._object(obj)))

    def patch(self, name: str, patch: Any, patch_type: PatchType = PatchType.MERGE) -> Dict[str, Any]:
        """Patches an object (a merge patch unless ``patch_type`` says
        otherwise).

        Raises any :class:`~capstan_guest.ApiError`."""
        self._writable("patch")
        return _decode(call(_kube.patch, self._ref(name), patch_type._into_wit(), _encode(patch)))

    def apply(self, obj: Mapping[str, Any], force: bool = False) -> Dict[str, Any]:
        """Server-side apply with this controller's field manager.

        Raises :class:`~capstan_guest.Conflict` if another manager owns a
        field (unless ``force``); any other :class:`~capstan_guest.ApiError`."""
        self._writable("apply")
        return _decode(call(_kube.apply, self._object(obj), force))

    def delete(self, name: str, propagation: Propagation = Propagation.DEFAULT) -> None:
        """Deletes an object.

        Raises :class:`~capstan_guest.NotFound`; any other
        :class:`~capstan_guest.ApiError`."""
        self._writable("delete")
        call(_kube.delete, self._ref(name), propagation._into_wit())

    def replace_status(self, obj: Mapping[str, Any]) -> Dict[str, Any]:
        """Replaces the status subresource.

        Raises any :class:`~capstan_guest.ApiError`."""
        self._writable("replace_status")
        return _decode(call(_kube.replace_status, self._object(obj)))

    def patch_status(self, name: str, patch: Any, patch_type: PatchType = PatchType.MERGE) -> Dict[str, Any]:
        """Patches the status subresource.

        Raises any :class:`~capstan_guest.ApiError`."""
        self._writable("patch_status")
        return _decode(call(_kube.patch_status, self._ref(name), patch_type._into_wit(), _encode(patch)))

    def apply_status(self, obj: Mapping[str, Any], force: bool = False) -> Dict[str, Any]:
        """Server-side apply of the status subresource.

        Raises any :class:`~capstan_guest.ApiError`."""
        self._writable("apply_status")
        return _decode(call(_kube.apply_status, self._object(obj), force))
