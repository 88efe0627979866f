"""Conversion between the versions of a CustomResourceDefinition.

Declare the CRD in the manifest (:meth:`Manifest.crd
<capstan_guest.Manifest.crd>`, with every version) and that this component
converts it (:meth:`Manifest.converts <capstan_guest.Manifest.converts>`),
subclass :class:`Conversion`, and export it with ``conversion=``. The API
server sends objects in any served version and asks for another;
:func:`between` does the work for two versions::

    class Greetings(capstan.Conversion):
        def convert(self, obj: dict, desired_api_version: str) -> dict:
            return capstan.between(obj, desired_api_version, up, down,
                                   old="example.com/v1alpha1", new="example.com/v1")
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Dict, List, Type

from componentize_py_types import Err
from wit_world.imports import capstan_operator_types as _wit

from .component import Component
from .log import log
from .tracebacks import format_exc


class Conversion(Component):
    """Converts objects of one CRD between its versions. A fresh instance
    is made for every request."""

    def convert(self, obj: Dict[str, Any], desired_api_version: str) -> Dict[str, Any]:
        """Converts ``obj`` (in its own ``apiVersion``) to
        ``desired_api_version`` (e.g. ``example.com/v1``). The result must
        keep the object's metadata as it was. Raise an exception to fail
        the whole request; its message is shown to the user."""
        raise NotImplementedError("a conversion must define convert()")


def between(
    obj: Dict[str, Any],
    to: str,
    up: Callable[[Dict[str, Any]], Dict[str, Any]],
    down: Callable[[Dict[str, Any]], Dict[str, Any]],
    *,
    old: str,
    new: str,
) -> Dict[str, Any]:
    """Conversion between two versions of one kind, ``old`` and ``new``
    (API versions, e.g. ``example.com/v1alpha1`` and ``example.com/v1``):
    ``obj`` is in either version (or already in ``to``) and comes back in
    ``to``, converted by ``up`` (old to new) or ``down`` (new to old). The
    functions get a copy of the object and return the converted one.

    What a conversion may not change is carried over: ``apiVersion`` is set
    to ``to``, ``kind`` and ``metadata`` come back as they were, except
    ``metadata.labels`` and ``metadata.annotations``, which the converted
    object sets if it has them (the API server lets a conversion change
    those two only): so ``up`` may keep a field the new version cannot
    represent in an annotation and ``down`` read it back and remove it. A
    ``status`` the converted object lacks is carried over as it was.

    Raises :class:`ValueError` when the object's version or ``to`` is
    neither ``old`` nor ``new``."""
    source = obj.get("apiVersion", "")
    if source == to:
        return obj
    if source == old and to == new:
        step = up
    elif source == new and to == old:
        step = down
    else:
        raise ValueError(f"cannot convert {source} to {to} (this component converts {old} and {new})")
    converted = step(copy.deepcopy(obj))
    if not isinstance(converted, dict):
        raise ValueError(f"converting {source} to {to} returned {type(converted).__name__}, not a dict")
    converted["apiVersion"] = to
    if "kind" in obj:
        converted["kind"] = obj["kind"]
    _carry_over(obj, converted)
    return converted


def _carry_over(original: Dict[str, Any], converted: Dict[str, Any]) -> None:
    """Puts back into ``converted`` what a conversion of ``original`` may
    not change or did not model (see :func:`between`)."""
    metadata = original.get("metadata")
    if isinstance(metadata, dict):
        kept = copy.deepcopy(metadata)
        changed = converted.get("metadata")
        for key in ("labels", "annotations"):
            if isinstance(changed, dict) and key in changed:
                if changed[key] is None:
                    kept.pop(key, None)
                else:
                    kept[key] = changed[key]
        converted["metadata"] = kept
    if "status" in original and converted.get("status") is None:
        converted["status"] = copy.deepcopy(original["status"])


def run_convert(conversion: Type[Conversion], request: _wit.ConversionRequest) -> List[bytes]:
    """Converts every object of the request, in order; raises ``Err`` with
    a message when one fails."""
    instance = conversion()
    desired = request.desired_api_version
    out: List[bytes] = []
    for i, data in enumerate(request.objects):
        try:
            obj = json.loads(data)
        except ValueError as e:
            raise Err(f"objects[{i}] is not JSON: {e}") from None
        try:
            converted = instance.convert(obj, desired)
        except Exception as e:  # noqa: BLE001 - the message goes to the user
            if not isinstance(e, (ValueError, NotImplementedError)):
                log.error("unhandled exception in convert", error=repr(e), traceback=format_exc())
            raise Err(str(e)) from None
        version = converted.get("apiVersion") if isinstance(converted, dict) else None
        if version != desired:
            raise Err(f"objects[{i}] came back as {version!r}, not {desired!r}")
        out.append(json.dumps(converted).encode())
    return out
