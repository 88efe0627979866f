"""Unit tests of capstan_guest on a fake host: ``python3 -m pytest guest-sdk/python/tests``."""

from __future__ import annotations

import json
from typing import Any, Dict

import pytest


def _status(code: int, reason: str) -> Any:
    from wit_world.imports import kube

    return kube.Status(code=code, reason=reason, message=f"{reason} message")


GREETING: Dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "kind": "Greeting",
    "metadata": {"name": "hi", "namespace": "demo"},
}


def test_a_not_found_error_is_not_found_and_get_opt_turns_it_into_none(host: Any) -> None:
    import capstan_guest as capstan
    from componentize_py_types import Err
    from wit_world.imports import kube

    def missing(ref: Any) -> bytes:
        raise Err(kube.Error_NotFound(_status(404, "NotFound")))

    host.impl["kube.get"] = missing
    api = capstan.Context(capstan.EventKind.ADDED, "demo", "hi").api("apps/v1", "Deployment", "demo")
    with pytest.raises(capstan.NotFound) as raised:
        api.get("web")
    assert raised.value.status is not None and raised.value.status.code == 404
    assert raised.value.is_not_found and not raised.value.is_conflict
    assert api.get_opt("web") is None
    ref = host.calls[0][1]
    assert (ref.kind.group, ref.kind.version, ref.kind.kind, ref.namespace, ref.name) == (
        "apps",
        "v1",
        "Deployment",
        "demo",
        "web",
    )


def test_every_kube_error_maps_to_its_exception(host: Any) -> None:
    import capstan_guest as capstan
    from componentize_py_types import Err
    from wit_world.imports import kube

    cases = [
        (kube.Error_Denied("no"), capstan.Denied, "denied by grants: no"),
        (kube.Error_AlreadyExists(_status(409, "AlreadyExists")), capstan.AlreadyExists, None),
        (kube.Error_Conflict(_status(409, "Conflict")), capstan.Conflict, None),
        (kube.Error_Invalid(_status(422, "Invalid")), capstan.Invalid, None),
        (kube.Error_Forbidden(_status(403, "Forbidden")), capstan.Forbidden, None),
        (kube.Error_BadRequest("bad"), capstan.BadRequest, "bad request: bad"),
        (kube.Error_Unavailable("down"), capstan.Unavailable, "api server unavailable: down"),
        (kube.Error_Other(_status(500, "InternalError")), capstan.OtherApiError, "api error 500: InternalError message"),
    ]
    api = capstan.Api("v1", "ConfigMap", "demo")
    for error, cls, text in cases:

        def fail(*args: Any, error: Any = error) -> bytes:
            raise Err(error)

        host.impl["kube.create"] = fail
        with pytest.raises(cls) as raised:
            api.create({"metadata": {"name": "x"}})
        if text is not None:
            assert str(raised.value) == text


def test_objects_sent_to_the_host_get_api_version_kind_and_namespace(host: Any) -> None:
    import capstan_guest as capstan

    host.impl["kube.apply"] = lambda data, force: data
    applied = capstan.Api("v1", "ConfigMap", "demo").apply({"metadata": {"name": "cm"}}, force=True)
    assert applied == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "demo"}}
    assert host.calls[0][2] is True


def test_the_manifest_and_outcome_have_the_shapes_of_the_wit_records() -> None:
    import capstan_guest as capstan

    m = capstan.Manifest("web").primary("apps/v1", "Deployment").owns("v1", "ConfigMap").resync(1.5)
    m = m.max_concurrency(0)._into_wit()
    assert (m.primary.group, m.primary.version, m.primary.kind) == ("apps", "v1", "Deployment")
    assert (m.owns[0].group, m.owns[0].kind) == ("", "ConfigMap")
    assert m.resync_seconds == 2 and m.max_concurrency == 1 and m.finalizer is None
    o = capstan.Outcome().child({"kind": "ConfigMap", "data": {"k": "✓"}}).requeue_after(2.5)._into_wit()
    assert o.requeue_after_ms == 2500
    assert json.loads(o.children[0]) == {"kind": "ConfigMap", "data": {"k": "✓"}}


def _probe() -> Any:
    import capstan_guest as capstan

    class Probe(capstan.Controller):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("probe").primary("example.com/v1", "Greeting")

        def delete(self, ctx: capstan.Context, obj: Dict[str, Any]) -> capstan.Outcome:
            return capstan.Outcome().event(capstan.Event.normal("Deleted", ctx.event.value))

        def reconcile(self, ctx: capstan.Context, obj: Dict[str, Any]) -> Any:
            mode = obj.get("spec", {}).get("mode")
            if mode == "terminal":
                raise capstan.Terminal("bad spec")
            if mode == "transient":
                raise capstan.Transient("later")
            if mode == "denied":
                raise capstan.Denied("no list")
            if mode == "bug":
                return obj["spec"]["nothing"]
            if mode == "nothing":
                return None
            return capstan.Outcome().status({"seen": ctx.event.value, "name": ctx.name, "namespace": ctx.namespace})

    return capstan.export(Probe)()


def _run(event: str, spec: Dict[str, Any]) -> Any:
    from wit_world.imports import types

    return _probe().reconcile(types.EventKind[event.upper()], json.dumps({**GREETING, "spec": spec}).encode())


def test_callbacks_are_chosen_by_event_kind(host: Any) -> None:
    assert json.loads(_run("added", {}).status) == {"seen": "added", "name": "hi", "namespace": "demo"}
    assert json.loads(_run("resync", {}).status)["seen"] == "resync"
    assert _run("deleted", {}).events[0].reason == "Deleted"
    assert _run("modified", {"mode": "nothing"}).children == []


def test_what_reconcile_raises_becomes_the_reconcile_error_the_host_expects(host: Any) -> None:
    from componentize_py_types import Err
    from wit_world.imports import types

    expected = {
        "terminal": types.ReconcileError_Terminal("bad spec"),
        "transient": types.ReconcileError_Transient("later"),
        "denied": types.ReconcileError_Terminal("denied by grants: no list"),
    }
    for mode, error in expected.items():
        with pytest.raises(Err) as raised:
            _run("added", {"mode": mode})
        assert raised.value.value == error
    with pytest.raises(Err) as raised:
        _run("added", {"mode": "bug"})
    assert isinstance(raised.value.value, types.ReconcileError_Transient)
    assert raised.value.value.value.startswith("unhandled KeyError")
    assert any(c[0] == "log.log" and c[2] == "unhandled exception in reconcile" for c in host.calls)


def test_an_object_that_is_not_json_is_a_terminal_error() -> None:
    from componentize_py_types import Err
    from wit_world.imports import types

    with pytest.raises(Err) as raised:
        _probe().reconcile(types.EventKind.ADDED, b"{")
    assert isinstance(raised.value.value, types.ReconcileError_Terminal)
