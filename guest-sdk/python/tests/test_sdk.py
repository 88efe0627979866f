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


def test_filling_in_an_object_leaves_the_callers_dicts_as_they_were(host: Any) -> None:
    import capstan_guest as capstan

    host.impl["kube.apply"] = lambda data, force: data
    meta = {"name": "cm", "labels": {"a": "b"}}
    obj = {"metadata": meta, "data": {"k": "✓"}}
    applied = capstan.Api("v1", "ConfigMap", "demo").apply(obj, force=True)
    assert applied["metadata"] == {"name": "cm", "labels": {"a": "b"}, "namespace": "demo"}
    assert obj == {"metadata": {"name": "cm", "labels": {"a": "b"}}, "data": {"k": "✓"}}
    assert meta == {"name": "cm", "labels": {"a": "b"}}
    # A namespace the object names is kept; metadata that is not an
    # object is sent as it is, for the API server to refuse.
    kept = capstan.Api("v1", "ConfigMap", "demo").apply({"metadata": {"name": "x", "namespace": "other"}})
    assert kept["metadata"]["namespace"] == "other"
    odd = capstan.Api("v1", "ConfigMap", "demo").apply({"metadata": None})
    assert odd["metadata"] is None


def test_json_copies_are_deep_and_bytes_round_trip() -> None:
    from capstan_guest import _json

    value = {"a": [1, {"b": "✓"}], "c": None, "d": 1.5, "e": True, "f": ("t",)}
    copied = _json.clone(value)
    assert copied == value
    assert copied["a"] is not value["a"] and copied["a"][1] is not value["a"][1]
    copied["a"][1]["b"] = "changed"
    assert value["a"][1]["b"] == "✓"
    assert _json.dumps({"k": "✓", "n": [1, 2]}) == '{"k":"✓","n":[1,2]}'.encode()
    assert _json.loads(_json.dumps(value)) == {**value, "f": ["t"]}
    with pytest.raises(ValueError):
        _json.loads(b"\xff")
    with pytest.raises(ValueError):
        _json.loads(b"{")


def test_the_manifest_and_outcome_have_the_shapes_of_the_wit_records() -> None:
    import capstan_guest as capstan
    from wit_world.imports import capstan_operator_types as types

    m = capstan.Manifest("web").primary("apps/v1", "Deployment").owns("v1", "ConfigMap").resync(1.5)
    m = m.max_concurrency(0)._into_wit()
    assert (m.primary.group, m.primary.version, m.primary.kind) == ("apps", "v1", "Deployment")
    assert (m.owns[0].kind.group, m.owns[0].kind.kind) == ("", "ConfigMap")
    assert m.owns[0].label_selector is None and m.owns[0].scope is None
    assert m.resync_seconds == 2 and m.max_concurrency == 1 and m.finalizer is None
    o = capstan.Outcome().child({"kind": "ConfigMap", "data": {"k": "✓"}}).requeue_after(2.5)._into_wit()
    assert o.requeue_after_ms == 2500
    assert o.children_policy == types.ChildrenPolicy.PRUNE
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

    return capstan.export(Probe).Controller()


def _request(event: str, obj: Any, failed: Any = (), cluster: str = "default", members: Any = ()) -> Any:
    from wit_world.imports import capstan_operator_types as types

    data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return types.ReconcileRequest(
        event=types.EventKind[event.upper()],
        object=data,
        failed_children=list(failed),
        cluster=cluster,
        members=list(members),
    )


def _run(event: str, spec: Dict[str, Any]) -> Any:
    return _probe().reconcile(_request(event, {**GREETING, "spec": spec}))


def test_callbacks_are_chosen_by_event_kind(host: Any) -> None:
    assert json.loads(_run("added", {}).status) == {"seen": "added", "name": "hi", "namespace": "demo"}
    assert json.loads(_run("resync", {}).status)["seen"] == "resync"
    assert _run("deleted", {}).events[0].reason == "Deleted"
    assert _run("modified", {"mode": "nothing"}).children == []


def test_what_reconcile_raises_becomes_the_failure_the_host_expects(host: Any) -> None:
    from componentize_py_types import Err
    from wit_world.imports import capstan_operator_types as types

    def failure(kind: Any, message: str) -> Any:
        return types.Failure(kind=kind, message=message, status=None, events=[])

    expected = {
        "terminal": failure(types.FailureKind.TERMINAL, "bad spec"),
        "transient": failure(types.FailureKind.TRANSIENT, "later"),
        "denied": failure(types.FailureKind.TERMINAL, "denied by grants: no list"),
    }
    for mode, error in expected.items():
        with pytest.raises(Err) as raised:
            _run("added", {"mode": mode})
        assert raised.value.value == error
    with pytest.raises(Err) as raised:
        _run("added", {"mode": "bug"})
    assert raised.value.value.kind == types.FailureKind.TRANSIENT
    assert raised.value.value.message.startswith("unhandled KeyError")
    assert any(c[0] == "log.log" and c[2] == "unhandled exception in reconcile" for c in host.calls)


def test_an_object_that_is_not_json_is_a_terminal_error() -> None:
    from componentize_py_types import Err
    from wit_world.imports import capstan_operator_types as types

    with pytest.raises(Err) as raised:
        _probe().reconcile(_request("added", b"{"))
    assert raised.value.value.kind == types.FailureKind.TERMINAL
    assert raised.value.value.message.startswith("object is not valid JSON")


def test_errors_carry_status_and_events_into_the_failure(host: Any) -> None:
    import capstan_guest as capstan
    from componentize_py_types import Err
    from wit_world.imports import capstan_operator_types as types

    ready_false = {"conditions": [{"type": "Ready", "status": "False", "reason": "InvalidSpec"}]}

    class Failing(capstan.Controller):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("failing").primary("example.com/v1", "Greeting")

        def reconcile(self, ctx: capstan.Context, obj: Dict[str, Any]) -> capstan.Outcome:
            mode = obj["spec"]["mode"]
            if mode == "terminal":
                raise capstan.Terminal(
                    "bad schedule",
                    status=ready_false,
                    events=[capstan.Event.warning("InvalidSpec", "Validate").note("schedule: x")],
                )
            if mode == "chained":
                raise capstan.Transient("source missing").with_status(["any", "json", 1]).with_event(
                    capstan.Event.normal("Waiting", "Reconcile")
                )
            raise capstan.Transient("plain")

    export = capstan.export(Failing).Controller()
    with pytest.raises(Err) as raised:
        export.reconcile(_request("added", {**GREETING, "spec": {"mode": "terminal"}}))
    failure = raised.value.value
    assert failure.kind == types.FailureKind.TERMINAL and failure.message == "bad schedule"
    assert json.loads(failure.status) == ready_false
    assert [(e.event_type, e.reason, e.action, e.note) for e in failure.events] == [
        (types.EventType.WARNING, "InvalidSpec", "Validate", "schedule: x")
    ]

    with pytest.raises(Err) as raised:
        export.reconcile(_request("resync", {**GREETING, "spec": {"mode": "chained"}}))
    failure = raised.value.value
    assert failure.kind == types.FailureKind.TRANSIENT and failure.message == "source missing"
    assert json.loads(failure.status) == ["any", "json", 1]
    assert [e.reason for e in failure.events] == ["Waiting"]

    with pytest.raises(Err) as raised:
        export.reconcile(_request("resync", {**GREETING, "spec": {"mode": "plain"}}))
    assert raised.value.value.status is None and raised.value.value.events == []


def test_error_status_and_events_are_checked_where_they_are_given() -> None:
    import capstan_guest as capstan

    error = capstan.Terminal("x", status={"ready": False})
    assert error.status == {"ready": False} and error.is_terminal and str(error) == "terminal: x"
    assert not capstan.Transient("y").is_terminal and capstan.Transient("y").status is None
    with pytest.raises(TypeError):
        capstan.Terminal("x", status={"when": object()})
    with pytest.raises(TypeError):
        capstan.Transient("x", events=["not an event"])  # type: ignore[list-item]


def test_keep_children_sets_the_children_policy() -> None:
    import capstan_guest as capstan
    from wit_world.imports import capstan_operator_types as types

    outcome = capstan.Outcome().keep_children()
    assert outcome.keeps_children
    assert outcome._into_wit().children_policy == types.ChildrenPolicy.KEEP
    assert outcome.keep_children(False)._into_wit().children_policy == types.ChildrenPolicy.PRUNE
    assert not capstan.Outcome().keeps_children


def test_failed_children_are_on_the_context(host: Any) -> None:
    import capstan_guest as capstan
    from wit_world.imports import capstan_operator_types as types

    seen: list = []

    class Watcher(capstan.Controller):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("watcher").primary("example.com/v1", "Greeting")

        def reconcile(self, ctx: capstan.Context, obj: Dict[str, Any]) -> capstan.Outcome:
            seen.append(list(ctx.failed_children))
            return capstan.Outcome()

    refused = [
        types.ChildFailure(
            child=types.ObjectRef(kind=types.GroupVersionKind("batch", "v1", "CronJob"), namespace="demo", name="nightly"),
            code=422,
            reason="Invalid",
            message="spec.schedule: Invalid value",
            cluster=None,
        ),
        types.ChildFailure(
            child=types.ObjectRef(kind=types.GroupVersionKind("", "v1", "Namespace"), namespace=None, name="team-a"),
            code=403,
            reason="Forbidden",
            message="no",
            cluster="eu-west",
        ),
    ]
    capstan.export(Watcher).Controller().reconcile(_request("resync", GREETING, refused))
    capstan.export(Watcher).Controller().reconcile(_request("resync", GREETING))
    assert seen[0] == [
        capstan.FailedChild("batch/v1", "CronJob", "demo", "nightly", 422, "Invalid", "spec.schedule: Invalid value"),
        capstan.FailedChild("v1", "Namespace", None, "team-a", 403, "Forbidden", "no", "eu-west"),
    ]
    assert seen[0][0].kind == "CronJob" and seen[0][1].namespace is None
    assert seen[0][0].cluster is None and seen[0][1].cluster == "eu-west"
    assert seen[1] == []
    assert capstan.Context(capstan.EventKind.ADDED, "demo", "hi").failed_children == []


def test_owned_kinds_take_a_label_selector_and_a_scope() -> None:
    import capstan_guest as capstan
    from wit_world.imports import capstan_operator_types as types

    m = (
        capstan.Manifest("tenant")
        .primary("example.com/v1", "Tenant")
        .owns("v1", "Namespace")
        .owns("v1", "ConfigMap", label_selector="example.com/tenant", scope=capstan.Scope.CLUSTER)
        .owns("apps/v1", "Deployment", scope=capstan.Scope.namespaces(["a", "b"]))
        ._into_wit()
    )
    assert m.owns[0] == types.Owned(kind=types.GroupVersionKind("", "v1", "Namespace"), label_selector=None, scope=None)
    assert m.owns[1] == types.Owned(
        kind=types.GroupVersionKind("", "v1", "ConfigMap"),
        label_selector="example.com/tenant",
        scope=types.Scope_Cluster(),
    )
    assert m.owns[2].kind.group == "apps" and m.owns[2].scope == types.Scope_Namespaces(["a", "b"])
    with pytest.raises(TypeError):
        capstan.Manifest("x").owns("v1", "ConfigMap", scope="cluster")  # type: ignore[arg-type]


def test_permissions_take_resource_names_and_the_rbac_verbs() -> None:
    import capstan_guest as capstan
    from wit_world.imports import capstan_operator_types as types

    p = capstan.Permission("rbac.authorization.k8s.io", "ClusterRole", [capstan.Verb.BIND, capstan.Verb.ESCALATE])
    p = p.scope(capstan.Scope.CLUSTER).names("view", "edit")._wit
    assert p.verbs == [types.Verb.BIND, types.Verb.ESCALATE]
    assert p.resource_names == ["view", "edit"] and p.scope == types.Scope_Cluster() and p.status is False
    assert capstan.Permission("", "Secret", capstan.READ_VERBS).names(["a", "b"])._wit.resource_names == ["a", "b"]
    assert capstan.Permission("", "Secret", capstan.READ_VERBS)._wit.resource_names == []
    # ALL_VERBS stays the API verbs: bind and escalate are asked for by name.
    assert capstan.Verb.BIND not in capstan.ALL_VERBS and len(capstan.ALL_VERBS) == 7
    m = capstan.Manifest("m").permission(capstan.Permission("", "Secret", [capstan.Verb.GET]).names("s"))._into_wit()
    assert m.permissions[0].resource_names == ["s"]


def test_watch_mappings_include_reference_and_all() -> None:
    import capstan_guest as capstan
    from wit_world.imports import capstan_operator_types as types

    Field, Mapping = capstan.Field, capstan.Mapping
    by_label = Mapping.reference(Field.label("example.com/team"), Field.annotation("example.com/ns"))
    assert by_label._wit == types.WatchMapping_Reference(
        types.Reference(name=types.FieldRef_Label("example.com/team"), namespace=types.FieldRef_Annotation("example.com/ns"))
    )
    own = Mapping.reference(Field.NAME)
    assert own._wit == types.WatchMapping_Reference(types.Reference(name=types.FieldRef_Name(), namespace=None))
    ns = Mapping.reference(Field.NAMESPACE, Field.NAME)._wit.value
    assert ns.name == types.FieldRef_Namespace() and ns.namespace == types.FieldRef_Name()
    assert Mapping.ALL._wit == types.WatchMapping_All()
    m = (
        capstan.Manifest("m")
        .watches(capstan.Watch("v1", "Namespace", Mapping.ALL))
        .watches(capstan.Watch("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", by_label).label_selector("team"))
        ._into_wit()
    )
    assert m.watches[0].mapping == types.WatchMapping_All()
    assert m.watches[1].mapping == by_label._wit and m.watches[1].label_selector == "team"
    assert m.watches[1].kind == types.GroupVersionKind("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding")
    with pytest.raises(TypeError):
        Mapping.reference("name")  # type: ignore[arg-type]


def test_the_cluster_of_the_request_is_on_the_context(host: Any) -> None:
    import capstan_guest as capstan

    seen: list = []

    class Fleet(capstan.Controller):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("fleet").primary("example.com/v1", "Greeting")

        def reconcile(self, ctx: capstan.Context, obj: Dict[str, Any]) -> capstan.Outcome:
            seen.append(ctx.cluster)
            return capstan.Outcome()

    controller = capstan.export(Fleet).Controller()
    controller.reconcile(_request("added", GREETING, cluster="eu-west"))
    controller.reconcile(_request("resync", GREETING))
    assert seen == ["eu-west", "default"]
    assert capstan.Context(capstan.EventKind.ADDED, "demo", "hi").cluster == "default"
    assert "cluster='eu-west'" in repr(capstan.Context(capstan.EventKind.ADDED, "demo", "hi", cluster="eu-west"))


def test_egress_origins_go_into_the_component_manifest_in_order() -> None:
    import capstan_guest as capstan

    plain = capstan.Manifest("quiet").primary("v1", "ConfigMap")
    assert plain._into_component(True).egress == []
    calling = (
        capstan.Manifest("caller")
        .primary("v1", "ConfigMap")
        .egress("https://api.example.com")
        .egress(["https://*.example.org", "http://alertmanager.monitoring.svc:9093"], "http://[::1]:8000-8010")
    )
    assert calling._into_component(True).egress == [
        "https://api.example.com",
        "https://*.example.org",
        "http://alertmanager.monitoring.svc:9093",
        "http://[::1]:8000-8010",
    ]
