"""Makes ``capstan_guest`` importable under plain CPython (pytest, an
editor), where the bindings componentize-py generates from the WIT contract
(``wit_world``, ``componentize_py_types``) are not on the path.

Inside a component they are, and nothing happens here. Otherwise they are
generated once with ``componentize-py bindings`` into
``~/.cache/capstan/python-bindings/<digest of the WIT and the tool>`` and put
on the path. The WIT contract is taken from ``$CAPSTAN_WIT``, else from
beside the SDK (``capstan-sdk/wit`` in a project ``capstan new`` made, or a
Capstan checkout's ``wit/``); componentize-py from ``$COMPONENTIZE_PY``,
``PATH``, the project's ``.venv`` or the toolchain cache of Capstan's tests.
Calling a host import without a fake (see :mod:`capstan_guest.testing`)
raises; the generated functions only work inside a component.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

# glob, hashlib, shutil, subprocess and tempfile are imported where they are used:
# inside a component (WASI) this module must import nothing it cannot load.


class BindingsUnavailable(ImportError):
    """The WIT bindings are neither on the path nor can they be generated."""


def _componentize_py() -> Optional[str]:
    import glob
    import shutil

    explicit = os.environ.get("COMPONENTIZE_PY")
    if explicit:
        return explicit
    found = shutil.which("componentize-py") or shutil.which("componentize-py", path=str(Path(".venv", "bin")))
    if found:
        return found
    cache = os.environ.get("CAPSTAN_CACHE", os.path.expanduser("~/.cache/capstan"))
    candidates = sorted(glob.glob(os.path.join(cache, "toolchains", "componentize-py-*", "bin", "componentize-py")))
    return candidates[-1] if candidates else None


def _wit_dir() -> Optional[Path]:
    explicit = os.environ.get("CAPSTAN_WIT")
    if explicit:
        return Path(explicit)
    # <root>/guest-sdk/python/capstan_guest/_plain.py -> <root>/wit
    beside = Path(__file__).resolve().parents[3] / "wit"
    return beside if beside.is_dir() else None


def ensure_bindings() -> None:
    """Puts the bindings on ``sys.path`` unless they are importable;
    raises :class:`BindingsUnavailable` saying what is missing."""
    try:
        import componentize_py_types  # noqa: F401
        import wit_world  # noqa: F401

        return
    except ImportError:
        pass
    import hashlib
    import shutil
    import subprocess
    import tempfile

    wit = _wit_dir()
    if wit is None or not any(wit.glob("*.wit")):
        raise BindingsUnavailable(
            "capstan_guest needs the WIT contract to run outside a component: set CAPSTAN_WIT to the "
            "project's capstan-sdk/wit (`capstan sdk --out capstan-sdk` writes it)"
        )
    tool = _componentize_py()
    if tool is None:
        raise BindingsUnavailable(
            "capstan_guest needs componentize-py to generate its bindings outside a component: "
            "pip install componentize-py==0.25.1, or set COMPONENTIZE_PY"
        )
    version = subprocess.run([tool, "--version"], check=True, capture_output=True, text=True).stdout.strip()
    digest = hashlib.sha256(version.encode())
    for path in sorted(wit.rglob("*.wit")):
        digest.update(str(path.relative_to(wit)).encode() + b"\0" + path.read_bytes())
    cache = Path(os.environ.get("CAPSTAN_CACHE", os.path.expanduser("~/.cache/capstan")), "python-bindings")
    target = cache / digest.hexdigest()[:16]
    if not (target / "wit_world").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix="bindings-", dir=cache)
        try:
            subprocess.run(
                [tool, "-d", str(wit), "-w", "operator", "bindings", scratch], check=True, capture_output=True
            )
            os.replace(scratch, target)
        except OSError:
            # Another process made it meanwhile.
            shutil.rmtree(scratch, ignore_errors=True)
        except subprocess.CalledProcessError as e:
            shutil.rmtree(scratch, ignore_errors=True)
            raise BindingsUnavailable(f"componentize-py bindings failed: {e.stderr.decode(errors='replace')}") from None
    sys.path.insert(0, str(target))


ensure_bindings()
