"""HTTP(S) calls to the origins the manifest declares in
:meth:`Manifest.egress <capstan_guest.Manifest.egress>`, through the
``wasi:http/outgoing-handler`` import of the ``operator`` world::

    from capstan_guest import http

    class Notifier(capstan.Controller):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("notifier").primary("example.com/v1", "Alert").egress("https://hooks.example.com")

        def reconcile(self, ctx: capstan.Context, alert: dict) -> capstan.Outcome:
            r = http.request("POST", "https://hooks.example.com/notify", json={"name": ctx.name})
            if not r.ok:
                raise capstan.Transient(f"hooks.example.com answered {r.status}")
            return capstan.Outcome().status({"ticket": r.json()["id"]})

:func:`request` blocks until the whole response is read; the host bounds
how long it may take. The host refuses a request to an origin the manifest
does not declare before it connects: :class:`HttpError` with code
``http-request-denied``. An :class:`HttpError` that escapes a reconcile is
logged and transient, like any exception.

Under :class:`capstan_guest.testing.FakeHost` no request leaves the
process: the fake answers the origins a test stubs with
:meth:`FakeHost.http <capstan_guest.testing.FakeHost.http>` and records
every request in ``host.requests``.
"""

from __future__ import annotations

import json as _json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from componentize_py_types import Err
from wit_world.imports import outgoing_handler as _handler
from wit_world.imports import streams as _streams
from wit_world.imports import wasi_http_types as _http


class HttpError(Exception):
    """A request that got no response: refused by the host, or failed on
    the way (DNS, connection, TLS, timeout). Not raised for an answer with
    an error status: see :attr:`Response.ok`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        """What failed, as ``wasi:http`` names it: ``http-request-denied``
        (the origin is not declared in ``egress``), ``dns-error``,
        ``connection-refused``, ``connection-timeout``,
        ``tls-certificate-error``, ``http-request-uri-invalid``, ..."""
        self.message = message
        """Details, when there are any."""


@dataclass
class Request:
    """A request as :func:`request` sends it (and as a stub of
    :meth:`FakeHost.http <capstan_guest.testing.FakeHost.http>` gets it)."""

    method: str
    """Upper-case method, e.g. ``POST``."""
    url: str
    """The full URL."""
    headers: Dict[str, str] = field(default_factory=dict)
    """Header names in lower case."""
    body: bytes = b""
    """The body; empty for none."""

    @property
    def origin(self) -> str:
        """``scheme://host[:port]`` of :attr:`url`, without the scheme's
        default port: what ``egress`` entries name."""
        return origin_of(self.url)

    def json(self) -> Any:
        """The body decoded as JSON."""
        return _json.loads(self.body)


@dataclass
class Response:
    """A response, read whole."""

    status: int
    """The HTTP status code."""
    headers: Dict[str, str] = field(default_factory=dict)
    """Header names in lower case; repeated headers joined with ``, ``."""
    body: bytes = b""
    """The body."""

    @property
    def ok(self) -> bool:
        """True for a status from 200 to 299."""
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        """The body as UTF-8 text (invalid bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body decoded as JSON; raises ``ValueError`` when it is not."""
        return _json.loads(self.body)

    @staticmethod
    def of_json(value: Any, status: int = 200) -> "Response":
        """A response with ``value`` as its JSON body, e.g. for a stub of
        :meth:`FakeHost.http <capstan_guest.testing.FakeHost.http>`:
        ``Response.of_json({"id": 7}, status=201)``."""
        return Response(status, {"content-type": "application/json"}, _json.dumps(value).encode())


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lower case, without the
    scheme's default port (80 for ``http``, 443 for ``https``)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def request(
    method: str,
    url: str,
    *,
    json: Any = None,
    data: Optional[bytes] = None,
    headers: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = None,
) -> Response:
    """Sends a request and reads the whole response.

    ``json``: a value sent as the JSON body, with ``content-type:
    application/json`` unless ``headers`` names one; ``data``: raw bytes
    instead. ``headers``: extra headers. ``timeout``: seconds allowed to
    connect, and then between bytes of the response (the host's limits
    apply either way)::

        r = http.request("GET", "https://api.example.com/v1/items/7", headers={"authorization": f"Bearer {token}"})
        item = r.json() if r.ok else None

    Returns the :class:`Response` whatever its status; raises
    :class:`HttpError` when none came (the origin is not declared in
    ``egress``, DNS, connection, TLS, timeout) and ``ValueError`` for a URL
    that is not ``http`` or ``https``."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not an http or https URL: {url!r}")
    if json is not None and data is not None:
        raise ValueError("give json or data, not both")
    sent: Dict[str, str] = {k.lower(): str(v) for k, v in (headers or {}).items()}
    body = b""
    if json is not None:
        body = _json.dumps(json).encode()
        sent.setdefault("content-type", "application/json")
    elif data is not None:
        body = bytes(data)
    return _send(Request(method.upper(), url, sent, body), timeout)


_METHODS: Dict[str, Callable[[], _http.Method]] = {
    "GET": _http.Method_Get,
    "HEAD": _http.Method_Head,
    "POST": _http.Method_Post,
    "PUT": _http.Method_Put,
    "DELETE": _http.Method_Delete,
    "CONNECT": _http.Method_Connect,
    "OPTIONS": _http.Method_Options,
    "TRACE": _http.Method_Trace,
    "PATCH": _http.Method_Patch,
}

# The most one blocking-write may take (wasi:io says 4096 bytes).
_CHUNK = 4096


def error_code(code: Any) -> HttpError:
    """The :class:`HttpError` for a ``wasi:http`` ``error-code``:
    ``ErrorCode_HttpRequestDenied`` is ``http-request-denied``."""
    name = type(code).__name__.removeprefix("ErrorCode_")
    kebab = re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()
    value = getattr(code, "value", None)
    return HttpError(kebab, "" if value is None else str(value))


def _wasi_send(req: Request, timeout: Optional[float]) -> Response:
    """Sends ``req`` through ``wasi:http/outgoing-handler``."""
    parts = urlsplit(req.url)
    headers = dict(req.headers)
    if req.body:
        # The length, not chunks: the body is known whole, and not every server takes chunks.
        headers.setdefault("content-length", str(len(req.body)))
    try:
        fields = _http.Fields.from_list([(k, v.encode()) for k, v in headers.items()])
    except Err as e:
        raise HttpError("http-request-header-invalid", f"{type(e.value).__name__}") from None
    outgoing = _http.OutgoingRequest(fields)
    method = _METHODS.get(req.method)
    try:
        outgoing.set_method(method() if method else _http.Method_Other(req.method))
    except Err:
        raise HttpError("http-request-method-invalid", req.method) from None
    try:
        outgoing.set_scheme(_http.Scheme_Https() if parts.scheme.lower() == "https" else _http.Scheme_Http())
        outgoing.set_authority(parts.netloc)
        outgoing.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    except Err:
        raise HttpError("http-request-uri-invalid", req.url) from None
    options = None
    if timeout is not None:
        nanos = max(0, int(timeout * 1e9))
        options = _http.RequestOptions()
        for setter in (options.set_connect_timeout, options.set_first_byte_timeout, options.set_between_bytes_timeout):
            try:
                setter(nanos)
            except Err:
                pass  # the host does not let guests set this one; its own limit applies
    out_body = outgoing.body()
    try:
        future = _handler.handle(outgoing, options)
    except Err as e:
        raise error_code(e.value) from None
    # The body goes after `handle`: the host reads it while it sends.
    with out_body.write() as stream:
        for at in range(0, len(req.body), _CHUNK):
            try:
                stream.blocking_write_and_flush(req.body[at : at + _CHUNK])
            except Err:
                break  # the host stopped reading: the future says why
    try:
        _http.OutgoingBody.finish(out_body, None)
    except Err:
        pass  # ditto
    with future:
        while (got := future.get()) is None:
            with future.subscribe() as pollable:
                pollable.block()
    # got: Ok(Ok(response)) or Ok(Err(error-code)); Err(None) if taken before.
    if isinstance(got, Err):
        raise HttpError("internal-error", "the response was taken before")
    inner = got.value
    if isinstance(inner, Err):
        raise error_code(inner.value)
    with inner.value as incoming:
        status = incoming.status()
        with incoming.headers() as fields:
            entries: List[Tuple[str, bytes]] = fields.entries()
        in_body = incoming.consume()
        chunks: List[bytes] = []
        with in_body.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(65536))
                except Err as e:
                    if isinstance(e.value, _streams.StreamError_Closed):
                        break
                    raise HttpError("http-response-incomplete", "reading the body failed") from None
        with _http.IncomingBody.finish(in_body):
            pass
    received: Dict[str, str] = {}
    for name, value in entries:
        name = name.lower()
        text = value.decode("latin-1")
        received[name] = f"{received[name]}, {text}" if name in received else text
    return Response(status, received, b"".join(chunks))


_send: Callable[[Request, Optional[float]], Response] = _wasi_send
"""What sends a request: ``wasi:http`` in a component;
:class:`~capstan_guest.testing.FakeHost` puts its stubs here."""
