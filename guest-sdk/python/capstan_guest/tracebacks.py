"""Tracebacks with their source lines inside the component.

A component runs without a file system: CPython's ``traceback`` finds no
file to read its lines from, and a bare ``File "/0/app.py", line 252``
tells little. componentize-py runs the app module once while it builds
(with the sources readable) and snapshots the interpreter, so
:func:`keep_sources`, called then by :func:`~capstan_guest.export`, reads
the source of every module loaded from the component's own path entries
(``/0/`` the app, ``/1/`` the SDK, …) into :mod:`linecache`, marked as
never to be checked against a file. :func:`format_exc` then gives the usual
traceback, lines included, with the path entry prefix dropped
(``File "app.py", line 252``).
"""

from __future__ import annotations

import linecache
import re
import sys
import traceback

_PATH_ENTRY = re.compile(r"^/\d+/")
_IN_TRACEBACK = re.compile(r'File "/\d+/')


def keep_sources() -> int:
    """Keeps the source of every loaded module whose file lies under one of
    componentize-py's path entries in :mod:`linecache`; returns how many
    files it kept. Outside a component (plain CPython, the files are on
    disk) it keeps nothing and tracebacks read the files as usual."""
    kept = 0
    for module in list(sys.modules.values()):
        filename = getattr(module, "__file__", None)
        if not isinstance(filename, str) or not _PATH_ENTRY.match(filename) or not filename.endswith(".py"):
            continue
        entry = linecache.cache.get(filename)
        if entry is not None and len(entry) == 4 and entry[1] is None:
            continue
        try:
            with open(filename, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        # An mtime of None: linecache.checkcache leaves the entry alone (as
        # for sources from a loader) instead of dropping it when the file
        # cannot be found at run time.
        linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
        kept += 1
    return kept


def format_exc() -> str:
    """The current exception's traceback, as :func:`traceback.format_exc`,
    with componentize-py's path entry prefixes dropped from file names."""
    return _IN_TRACEBACK.sub('File "', traceback.format_exc())
