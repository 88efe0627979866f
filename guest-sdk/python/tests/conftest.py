"""Runs the library under plain CPython: the bindings componentize-py
generates from ``wit/`` (``wit_world``, ``componentize_py_types``) are
written to a temporary folder and put on the path; their import functions
are replaced by a programmable fake host.

componentize-py is taken from ``$COMPONENTIZE_PY``, from ``PATH``, or from
the toolchain ``tests/build-polyglot-guests.sh`` installs; without it the
tests are skipped.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _componentize_py() -> Optional[str]:
    explicit = os.environ.get("COMPONENTIZE_PY")
    if explicit:
        return explicit
    found = shutil.which("componentize-py")
    if found:
        return found
    cache = os.environ.get("CAPSTAN_CACHE", os.path.expanduser("~/.cache/capstan"))
    candidates = sorted(glob.glob(os.path.join(cache, "toolchains", "componentize-py-*", "bin", "componentize-py")))
    return candidates[-1] if candidates else None


def _bindings() -> Optional[str]:
    tool = _componentize_py()
    if tool is None:
        return None
    out = tempfile.mkdtemp(prefix="capstan-py-bindings-")
    atexit.register(shutil.rmtree, out, True)
    subprocess.run([tool, "-d", str(ROOT / "wit"), "-w", "operator", "bindings", out], check=True)
    return out


_BINDINGS = _bindings()
if _BINDINGS is not None:
    sys.path[:0] = [_BINDINGS, str(ROOT / "guest-sdk" / "python")]


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Skips every test when the bindings cannot be generated."""
    if _BINDINGS is None:
        skip = pytest.mark.skip(reason="componentize-py not found (run tests/build-polyglot-guests.sh)")
        for item in items:
            item.add_marker(skip)


class FakeHost:
    """The host imports, replaced: ``impl[name]`` answers a call, every call
    is recorded in ``calls``."""

    def __init__(self) -> None:
        self.calls: List[tuple] = []
        self.impl: Dict[str, Callable[..., Any]] = {}

    def function(self, name: str) -> Callable[..., Any]:
        """The fake of import ``name`` (e.g. ``kube.get``)."""

        def call(*args: Any) -> Any:
            self.calls.append((name, *args))
            if name == "log.log":
                return None
            if name not in self.impl:
                raise AssertionError(f"fake host: {name} not implemented")
            return self.impl[name](*args)

        return call


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHost]:
    """A fake host wired into the generated import modules."""
    from wit_world.imports import events, kube, log

    fake = FakeHost()
    for name in ["get", "list", "create", "replace", "patch", "apply", "delete", "replace_status", "patch_status", "apply_status"]:
        monkeypatch.setattr(kube, name, fake.function(f"kube.{name}"))
    monkeypatch.setattr(events, "record", fake.function("events.record"))
    monkeypatch.setattr(log, "log", fake.function("log.log"))
    yield fake
