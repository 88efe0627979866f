"""Runs the library under plain CPython: importing it generates the
bindings componentize-py makes from ``wit/`` (``wit_world``,
``componentize_py_types``) into ``~/.cache/capstan/python-bindings``; the
``host`` fixture replaces their import functions by a programmable fake.

componentize-py is taken from ``$COMPONENTIZE_PY``, from ``PATH``, or from
the toolchain ``tests/build-polyglot-guests.sh`` installs; without it the
tests are skipped.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[3]


# The package under test; importing it generates the WIT bindings
# (capstan_guest._plain) with componentize-py from $COMPONENTIZE_PY, PATH or
# the toolchain cache of tests/build-polyglot-guests.sh.
sys.path.insert(0, str(ROOT / "guest-sdk" / "python"))
_WHY: Optional[str] = None
try:
    import capstan_guest  # noqa: F401
except ImportError as e:
    _WHY = str(e)


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Skips every test when the bindings cannot be generated."""
    if _WHY is not None:
        skip = pytest.mark.skip(reason=f"{_WHY} (run tests/build-polyglot-guests.sh)")
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


@pytest.fixture(autouse=True)
def fresh_instance() -> Iterator[None]:
    """Each test runs as a fresh instance would: the Nodes a scheduler
    holds between decisions start empty."""
    if _WHY is None:
        from capstan_guest import scheduler

        scheduler._held.clear()
    yield


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHost]:
    """A fake host wired into the generated import modules."""
    from wit_world.imports import events, kube, log

    fake = FakeHost()
    writes = ["create", "replace", "patch", "apply", "delete", "replace_status", "patch_status", "apply_status"]
    for name in ["get", "list", *writes, "get_in", "list_in"]:
        monkeypatch.setattr(kube, name, fake.function(f"kube.{name}"))
    monkeypatch.setattr(events, "record", fake.function("events.record"))
    monkeypatch.setattr(log, "log", fake.function("log.log"))
    yield fake
