"""JSON across the component boundary, and copies of JSON values.

Every reconcile decodes its object and encodes its children and status, so
these run on every call and are kept lean: a module-level encoder and
decoder instead of ``json.dumps`` and ``json.loads`` rebuilding theirs
from keyword arguments (and sniffing the encoding of bytes), and a copy
of plain dicts, lists and scalars instead of :func:`copy.deepcopy` and its
memo. Profiled with cProfile under plain CPython, deepcopy of its one
condition was a quarter of the greeter's time per reconcile; in the
component (``host/benches/languages.rs``) the greeter's kept-instance
reconcile went from 0.43-0.45 ms to 0.38-0.40 ms with this module.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Dict, Mapping

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_DECODER = json.JSONDecoder()
_SCALARS = frozenset((str, int, float, bool, type(None)))


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON. Raises ``TypeError`` or
    ``ValueError`` for what JSON cannot hold."""
    return _ENCODER.encode(value).encode("utf-8", "surrogatepass")


def loads(data: bytes) -> Any:
    """The JSON value in UTF-8 ``data``. Raises ``ValueError`` (a
    ``UnicodeDecodeError`` or ``json.JSONDecodeError``) if it is not one."""
    return _DECODER.decode(data.decode("utf-8", "surrogatepass"))


def clone(value: Any) -> Any:
    """A deep copy of ``value``: dicts and lists are copied, JSON scalars
    shared (they are immutable), anything else goes to
    :func:`copy.deepcopy`."""
    kind = type(value)
    if kind is dict:
        return {k: clone(v) for k, v in value.items()}
    if kind is list:
        return [clone(v) for v in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)


def clone_mapping(value: Mapping[str, Any]) -> Dict[str, Any]:
    """A deep copy of ``value`` as a dict (see :func:`clone`)."""
    return {k: clone(v) for k, v in value.items()}
