"""capstan_guest.http: requests through wasi:http (with the wasi:http
resources faked), and the FakeHost's stubbed origins."""

from __future__ import annotations

import types
from typing import Any, Dict, List, Optional

import pytest

ALERT: Dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "kind": "Alert",
    "metadata": {"name": "disk-full", "namespace": "ops"},
    "spec": {"severity": "page"},
}


def _notifier() -> Any:
    import capstan_guest as capstan
    from capstan_guest import http

    class Notifier(capstan.Controller):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("notifier").primary("example.com/v1", "Alert").egress("https://hooks.example.com")

        def reconcile(self, ctx: capstan.Context, alert: Dict[str, Any]) -> capstan.Outcome:
            r = http.request("POST", "https://hooks.example.com/notify?via=capstan", json={"name": ctx.name})
            if not r.ok:
                raise capstan.Transient(f"hooks.example.com answered {r.status}")
            return capstan.Outcome().status({"ticket": r.json()["id"]})

    return Notifier


def test_a_stubbed_origin_answers_and_every_request_is_recorded() -> None:
    from capstan_guest.http import Response
    from capstan_guest.testing import FakeHost, reconcile

    host = FakeHost([ALERT]).http("https://hooks.example.com:443", Response.of_json({"id": 7}, status=201))
    done = reconcile(_notifier(), ALERT, host=host)
    assert done.status == {"ticket": 7}
    [sent] = host.requests
    assert (sent.method, sent.url, sent.origin) == (
        "POST",
        "https://hooks.example.com/notify?via=capstan",
        "https://hooks.example.com",
    )
    assert sent.json() == {"name": "disk-full"}
    assert sent.headers == {"content-type": "application/json"}
    assert ("http.request", sent) in host.calls


def test_a_stub_may_be_a_function_of_the_request_or_an_error() -> None:
    import capstan_guest as capstan
    from capstan_guest.http import HttpError, Response
    from capstan_guest.testing import FakeHost, reconcile

    def answer(request: Any) -> Response:
        return Response(503) if request.json()["name"] == "disk-full" else Response.of_json({"id": 1})

    with pytest.raises(capstan.Transient, match="answered 503"):
        reconcile(_notifier(), ALERT, host=FakeHost([ALERT]).http("https://hooks.example.com", answer))
    refused = FakeHost([ALERT]).http("https://hooks.example.com", HttpError("connection-refused", "no listener"))
    with pytest.raises(HttpError) as raised:
        reconcile(_notifier(), ALERT, host=refused)
    assert raised.value.code == "connection-refused"
    assert len(refused.requests) == 1


def test_an_origin_not_stubbed_is_refused_like_one_not_in_egress() -> None:
    from capstan_guest.http import HttpError, Response
    from capstan_guest.testing import FakeHost, reconcile

    host = FakeHost([ALERT]).http("http://hooks.example.com", Response(200))  # http, not https
    with pytest.raises(HttpError) as raised:
        reconcile(_notifier(), ALERT, host=host)
    assert raised.value.code == "http-request-denied"
    assert "https://hooks.example.com is not stubbed" in str(raised.value)
    assert [r.origin for r in host.requests] == ["https://hooks.example.com"]


def test_outside_a_fake_host_the_requests_go_to_wasi() -> None:
    from capstan_guest import http
    from capstan_guest.testing import FakeHost

    with FakeHost():
        assert http._send != http._wasi_send
    assert http._send == http._wasi_send


def test_origins_drop_the_default_port_and_keep_others() -> None:
    from capstan_guest.http import origin_of

    assert origin_of("https://API.example.com:443/x?y") == "https://api.example.com"
    assert origin_of("http://example.com:80") == "http://example.com"
    assert origin_of("http://alertmanager.monitoring.svc:9093/api/v2/alerts") == "http://alertmanager.monitoring.svc:9093"
    assert origin_of("https://[::1]:8443/") == "https://[::1]:8443"


def test_bad_urls_and_bodies_are_refused_before_sending() -> None:
    from capstan_guest import http
    from capstan_guest.testing import FakeHost

    with FakeHost() as host:
        with pytest.raises(ValueError, match="not an http or https URL"):
            http.request("GET", "ftp://example.com/file")
        with pytest.raises(ValueError, match="json or data"):
            http.request("POST", "https://example.com", json={}, data=b"x")
    assert host.requests == []


class _Resource:
    """A wasi resource: a context manager that records when it is dropped."""

    dropped: List[str]

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.dropped.append(type(self).__name__)


def _fake_wasi(monkeypatch: pytest.MonkeyPatch, outcome: Any, chunks: List[bytes]) -> Dict[str, Any]:
    """Replaces the wasi:http bindings capstan_guest.http uses; returns what
    the fakes saw."""
    from componentize_py_types import Err, Ok
    from capstan_guest import http
    from wit_world.imports import streams
    from wit_world.imports import wasi_http_types as real

    seen: Dict[str, Any] = {"written": [], "dropped": [], "options": None}
    _Resource.dropped = seen["dropped"]

    class Fields(_Resource):
        def __init__(self, entries: List[Any]) -> None:
            self._entries = entries

        @classmethod
        def from_list(cls, entries: List[Any]) -> "Fields":
            seen["headers"] = entries
            return cls(entries)

        def entries(self) -> List[Any]:
            return self._entries

    class OutputStream(_Resource):
        def blocking_write_and_flush(self, data: bytes) -> None:
            assert len(data) <= 4096
            seen["written"].append(bytes(data))

    class OutgoingBody(_Resource):
        def write(self) -> OutputStream:
            return OutputStream()

        @classmethod
        def finish(cls, body: Any, trailers: Optional[Any]) -> None:
            seen["finished"] = True

    class OutgoingRequest(_Resource):
        def __init__(self, headers: Fields) -> None:
            seen["request"] = self

        def set_method(self, m: Any) -> None:
            self.method = m

        def set_scheme(self, s: Any) -> None:
            self.scheme = s

        def set_authority(self, a: str) -> None:
            self.authority = a

        def set_path_with_query(self, p: str) -> None:
            self.path = p

        def body(self) -> OutgoingBody:
            return OutgoingBody()

    class RequestOptions(_Resource):
        def __init__(self) -> None:
            seen["options"] = self

        def set_connect_timeout(self, d: int) -> None:
            self.connect = d

        def set_first_byte_timeout(self, d: int) -> None:
            raise Err(None)  # a host that keeps this one to itself

        def set_between_bytes_timeout(self, d: int) -> None:
            self.between = d

    class InputStream(_Resource):
        def blocking_read(self, n: int) -> bytes:
            if chunks:
                return chunks.pop(0)
            raise Err(streams.StreamError_Closed())

    class IncomingBody(_Resource):
        def stream(self) -> InputStream:
            return InputStream()

        @classmethod
        def finish(cls, body: Any) -> _Resource:
            return _Resource()

    class IncomingResponse(_Resource):
        def status(self) -> int:
            return 200

        def headers(self) -> Fields:
            return Fields([("Content-Type", b"application/json"), ("Vary", b"a"), ("vary", b"b")])

        def consume(self) -> IncomingBody:
            return IncomingBody()

    class Pollable(_Resource):
        def block(self) -> None:
            seen["blocked"] = seen.get("blocked", 0) + 1

    class Future(_Resource):
        polls = 0

        def get(self) -> Any:
            Future.polls += 1
            if Future.polls < 2:
                return None
            return Ok(Err(outcome) if not isinstance(outcome, str) else Ok(IncomingResponse()))

        def subscribe(self) -> Pollable:
            return Pollable()

    def handle(request: Any, options: Any) -> Future:
        seen["handled"] = request
        return Future()

    fake = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
    fake.Fields = Fields
    fake.OutgoingRequest = OutgoingRequest
    fake.OutgoingBody = OutgoingBody
    fake.RequestOptions = RequestOptions
    fake.IncomingBody = IncomingBody
    monkeypatch.setattr(http, "_http", fake)
    monkeypatch.setattr(http, "_handler", types.SimpleNamespace(handle=handle))
    return seen


def test_a_request_goes_out_through_the_outgoing_handler_and_the_response_is_read_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from capstan_guest import http
    from wit_world.imports import wasi_http_types as real

    seen = _fake_wasi(monkeypatch, "ok", [b'{"id":', b" 7}"])
    big = {"data": "x" * 10000}
    r = http.request("put", "https://api.example.com:8443/v1/items?id=7", json=big, headers={"X-Token": "t"}, timeout=2.5)
    sent = seen["request"]
    assert isinstance(sent.method, real.Method_Put)
    assert isinstance(sent.scheme, real.Scheme_Https)
    assert (sent.authority, sent.path) == ("api.example.com:8443", "/v1/items?id=7")
    length = str(len(http._json.dumps(big))).encode()
    assert dict(seen["headers"]) == {"x-token": b"t", "content-type": b"application/json", "content-length": length}
    assert b"".join(seen["written"]) == http._json.dumps(big).encode()
    assert len(seen["written"]) == 3, "the body goes in chunks of at most 4096 bytes"
    assert seen["finished"] and seen["handled"] is sent
    assert (seen["options"].connect, seen["options"].between) == (2_500_000_000, 2_500_000_000)
    assert seen["blocked"] == 1, "the guest waits on the future's pollable until the response is there"
    assert (r.status, r.ok, r.json()) == (200, True, {"id": 7})
    assert r.headers == {"content-type": "application/json", "vary": "a, b"}
    assert seen["dropped"].index("InputStream") < seen["dropped"].index("IncomingResponse"), "child resources go first"


def test_a_request_the_host_refuses_raises_http_error_with_the_wasi_code(monkeypatch: pytest.MonkeyPatch) -> None:
    from capstan_guest import http
    from wit_world.imports import wasi_http_types as real

    seen = _fake_wasi(monkeypatch, real.ErrorCode_HttpRequestDenied(), [])
    with pytest.raises(http.HttpError) as raised:
        http.request("GET", "http://metadata.internal/")
    assert raised.value.code == "http-request-denied"
    assert seen["options"] is None and seen["written"] == []
    assert http.error_code(real.ErrorCode_DnsError(real.DnsErrorPayload(rcode="NXDOMAIN", info_code=None))).code == (
        "dns-error"
    )
