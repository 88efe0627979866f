"""Fleet controllers (contract 0.4.0): ``Manifest.clusters`` and
``Manifest.fleet``, ``Outcome.child_in``, ``Context.members``,
``Context.api_in``, and the fake host of ``capstan_guest.testing`` for
them."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

SPREAD: Dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "kind": "Spread",
    "metadata": {"name": "hi", "namespace": "demo", "generation": 2},
    "spec": {"message": "hello"},
}


def _configmap(name: str, message: str, **labels: str) -> Dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "demo", "labels": dict(labels)},
        "data": {"message": message},
    }


def _request(obj: Any, cluster: str = "default", members: Any = ()) -> Any:
    from wit_world.imports import capstan_operator_types as types

    return types.ReconcileRequest(
        event=types.EventKind.ADDED,
        object=json.dumps(obj).encode(),
        failed_children=[],
        cluster=cluster,
        members=list(members),
    )


def test_a_manifest_declares_no_clusters_and_no_fleet_by_default() -> None:
    import capstan_guest as capstan

    component = capstan.Manifest("plain").primary("v1", "ConfigMap")._into_component(True)
    assert component.clusters == []
    assert component.fleet is None


def test_clusters_are_given_as_arguments_or_lists_and_add_up_in_order() -> None:
    import capstan_guest as capstan

    m = capstan.Manifest("uniform").primary("v1", "ConfigMap").clusters("default", "eu-west").clusters(["us-east"])
    m.clusters(("ap-south", "edge"), "lab")
    assert m._into_component(True).clusters == ["default", "eu-west", "us-east", "ap-south", "edge", "lab"]
    assert m._into_component(True).fleet is None
    for wrong in (3, [3], None):
        with pytest.raises(TypeError, match="cluster names"):
            capstan.Manifest("x").clusters(wrong)  # type: ignore[arg-type]


def test_fleet_fills_the_fleet_record_with_home_and_members() -> None:
    import capstan_guest as capstan
    from wit_world.imports import capstan_operator_types as types

    def fleet(m: Any) -> Any:
        return m._into_component(True).fleet

    base = capstan.Manifest("spreader").primary("example.com/v1", "Spread").owns("v1", "ConfigMap")
    assert fleet(base.fleet(home="default", members=["eu-west", "us-east"])) == types.Fleet(
        home="default", members=["eu-west", "us-east"]
    )
    assert fleet(capstan.Manifest("a").fleet()) == types.Fleet(home="default", members=[])
    assert fleet(capstan.Manifest("b").fleet("hub")) == types.Fleet(home="hub", members=[])
    assert fleet(capstan.Manifest("c").fleet("hub", ("x", "y"))) == types.Fleet(home="hub", members=["x", "y"])
    assert fleet(capstan.Manifest("d").fleet("hub", "x")) == types.Fleet(home="hub", members=["x"])
    # The last call wins; clusters stay as declared (the host ignores them for a fleet).
    both = capstan.Manifest("e").clusters("a").fleet("one").fleet("two", ["m"])._into_component(True)
    assert both.fleet == types.Fleet(home="two", members=["m"]) and both.clusters == ["a"]
    with pytest.raises(TypeError, match="fleet home"):
        capstan.Manifest("x").fleet(home=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cluster names"):
        capstan.Manifest("x").fleet("default", members=["a", 1])  # type: ignore[list-item]


def test_the_exported_manifest_carries_the_fleet(host: Any) -> None:
    import capstan_guest as capstan
    from wit_world.imports import capstan_operator_types as types

    class Spreader(capstan.Controller):
        def manifest(self) -> capstan.Manifest:
            return (
                capstan.Manifest("spreader")
                .primary("example.com/v1", "Spread")
                .owns("v1", "ConfigMap")
                .fleet(home="default", members=["eu"])
            )

    manifest = capstan.export(Spreader).Controller().manifest()
    assert manifest.fleet == types.Fleet(home="default", members=["eu"])
    assert manifest.clusters == [] and manifest.roles.reconcile


def test_child_in_adds_a_member_child_serialized_as_child_does() -> None:
    import capstan_guest as capstan
    from wit_world.imports import capstan_operator_types as types

    assert capstan.Outcome()._into_wit().member_children == []
    cm = _configmap("hi-greeting", "héllo ✓")
    o = capstan.Outcome().child(cm).child_in("eu-west", cm).child_in("us-east", {"kind": "Secret"})._into_wit()
    assert [c.cluster for c in o.member_children] == ["eu-west", "us-east"]
    assert isinstance(o.member_children[0], types.MemberChild)
    assert o.member_children[0].object == o.children[0], "the same bytes as child()"
    assert json.loads(o.member_children[1].object) == {"kind": "Secret"}
    assert len(o.children) == 1, "member children are not children of the own cluster"
    with pytest.raises(TypeError):
        capstan.Outcome().child_in(None, cm)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        capstan.Outcome().child_in("eu", {"bad": object()})


def test_the_members_of_the_request_are_on_the_context(host: Any) -> None:
    import capstan_guest as capstan

    seen: List[Any] = []

    class Spreader(capstan.Controller):
        def reconcile(self, ctx: capstan.Context, obj: Dict[str, Any]) -> capstan.Outcome:
            seen.append((ctx.cluster, list(ctx.members)))
            return capstan.Outcome()

    controller = capstan.export(Spreader).Controller()
    controller.reconcile(_request(SPREAD, members=["eu-west", "us-east"]))
    controller.reconcile(_request(SPREAD, cluster="eu-west"))
    assert seen == [("default", ["eu-west", "us-east"]), ("eu-west", [])]
    ctx = capstan.Context(capstan.EventKind.ADDED, "demo", "hi", members=("a", "b"))
    assert ctx.members == ["a", "b"]
    assert "members=['a', 'b']" in repr(ctx)
    assert "members" not in repr(capstan.Context(capstan.EventKind.ADDED, "demo", "hi"))
    assert capstan.Context(capstan.EventKind.ADDED, "demo", "hi").members == []


def test_api_in_reads_with_get_in_and_list_in(host: Any) -> None:
    import capstan_guest as capstan
    from componentize_py_types import Err
    from wit_world.imports import kube

    stored = _configmap("hi-greeting", "hello")
    host.impl["kube.get_in"] = lambda cluster, ref: json.dumps(stored).encode()
    host.impl["kube.list_in"] = lambda cluster, gvk, ns, params: [json.dumps(stored).encode()]
    ctx = capstan.Context(capstan.EventKind.ADDED, "demo", "hi", members=["eu"])
    cms = ctx.api_in("eu", "v1", "ConfigMap", "demo")
    assert cms.cluster == "eu" and "cluster='eu'" in repr(cms)
    assert cms.get("hi-greeting") == stored
    assert cms.list(label_selector="app=web") == [stored]
    (get, cluster, ref), (lst, lcluster, gvk, ns, params) = host.calls
    assert (get, cluster, ref.kind.kind, ref.kind.version, ref.namespace, ref.name) == (
        "kube.get_in",
        "eu",
        "ConfigMap",
        "v1",
        "demo",
        "hi-greeting",
    )
    assert (lst, lcluster, gvk.group, gvk.kind, ns) == ("kube.list_in", "eu", "", "ConfigMap", "demo")
    assert (params.label_selector, params.field_selector) == ("app=web", None)

    def missing(cluster: str, ref: Any) -> bytes:
        raise Err(kube.Error_NotFound(kube.Status(code=404, reason="NotFound", message="gone")))

    host.impl["kube.get_in"] = missing
    assert cms.get_opt("hi-greeting") is None
    with pytest.raises(capstan.NotFound):
        cms.get("hi-greeting")

    def denied(cluster: str, ref: Any) -> bytes:
        raise Err(kube.Error_Denied(f"cluster {cluster} is not a member"))

    host.impl["kube.get_in"] = denied
    with pytest.raises(capstan.Denied, match="cluster mars is not a member"):
        ctx.api_in("mars", "v1", "ConfigMap", "demo").get_opt("x")
    # ctx.api stays the request's own cluster.
    host.impl["kube.get"] = lambda ref: json.dumps(stored).encode()
    assert ctx.api("v1", "ConfigMap", "demo").get("hi-greeting") == stored
    assert host.calls[-1][0] == "kube.get"
    assert ctx.api("v1", "ConfigMap", "demo").cluster is None


def test_writes_through_api_in_are_refused_without_calling_the_host(host: Any) -> None:
    import capstan_guest as capstan

    cms = capstan.Context(capstan.EventKind.ADDED, "demo", "hi", members=["eu"]).api_in("eu", "v1", "ConfigMap", "demo")
    cm = _configmap("x", "y")
    writes = [
        ("create", lambda: cms.create(cm)),
        ("replace", lambda: cms.replace(cm)),
        ("patch", lambda: cms.patch("x", {"data": {}})),
        ("apply", lambda: cms.apply(cm, force=True)),
        ("delete", lambda: cms.delete("x")),
        ("replace_status", lambda: cms.replace_status(cm)),
        ("patch_status", lambda: cms.patch_status("x", {"status": {}})),
        ("apply_status", lambda: cms.apply_status(cm)),
    ]
    for method, write in writes:
        with pytest.raises(capstan.Denied) as raised:
            write()
        assert "a fleet controller writes in member clusters through Outcome.child_in" in str(raised.value), method
        assert f"Api.{method} " in str(raised.value)
        assert isinstance(raised.value, capstan.ApiError)
    assert host.calls == []


def _spreader() -> Any:
    import capstan_guest as capstan

    class Spreader(capstan.Controller):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("spreader").primary("example.com/v1", "Spread").owns("v1", "ConfigMap").fleet()

        def reconcile(self, ctx: capstan.Context, obj: Dict[str, Any]) -> capstan.Outcome:
            name = f"{ctx.name}-greeting"
            outcome = capstan.Outcome()
            seen = {}
            for member in ctx.members:
                cm = _configmap(name, obj["spec"]["message"])
                outcome.child_in(member, cm)
                there = ctx.api_in(member, "v1", "ConfigMap", ctx.namespace).get_opt(name)
                seen[member] = None if there is None else there["data"]["message"]
            return outcome.status({"seen": seen})

    return Spreader


def test_the_fake_reads_in_each_member_and_exposes_the_member_children() -> None:
    from capstan_guest.testing import FakeHost, MemberChild, reconcile

    in_eu = _configmap("hi-greeting", "old")
    in_us = _configmap("hi-greeting", "hello")
    host = FakeHost([SPREAD, _configmap("hi-greeting", "own")], clusters={"eu": [in_eu]})
    host.put(in_us, cluster="us")
    done = reconcile(_spreader(), SPREAD, host=host, members=["eu", "us", "ap"])
    assert done.status == {"seen": {"eu": "old", "us": "hello", "ap": None}}
    assert [c.cluster for c in done.member_children] == ["eu", "us", "ap"]
    assert done.member_children[0] == MemberChild("eu", _configmap("hi-greeting", "hello"))
    assert done.member_children[1] == ("us", _configmap("hi-greeting", "hello")), "a (cluster, object) pair"
    assert done.children_in("ap") == [_configmap("hi-greeting", "hello")]
    assert done.children_in("mars") == [] and done.children == []
    assert [c[:2] for c in host.calls] == [("kube.get_in", "eu"), ("kube.get_in", "us"), ("kube.get_in", "ap")]
    assert host.get("v1", "ConfigMap", "demo", "hi-greeting", cluster="us")["data"] == {"message": "hello"}
    assert host.get("v1", "ConfigMap", "demo", "hi-greeting")["data"] == {"message": "own"}
    assert (host.cluster, host.members) == ("default", ["eu", "us", "ap"])
    # Without members, nothing is spread.
    plain = reconcile(_spreader(), SPREAD)
    assert plain.member_children == [] and plain.status == {"seen": {}}


def test_the_fake_denies_a_cluster_neither_own_nor_a_member() -> None:
    import capstan_guest as capstan
    from capstan_guest.testing import FakeHost, reconcile

    class Prober(capstan.Controller):
        def reconcile(self, ctx: capstan.Context, obj: Dict[str, Any]) -> capstan.Outcome:
            found = {}
            for cluster in ("hub", "eu", "mars"):
                try:
                    got = ctx.api_in(cluster, "v1", "ConfigMap", "demo").list()
                    found[cluster] = [o["data"]["message"] for o in got]
                except capstan.Denied as e:
                    found[cluster] = str(e)
            return capstan.Outcome().status(found)

    host = FakeHost(
        [_configmap("own", "in hub")],
        clusters={
            "eu": [_configmap("a", "in eu")],
            "mars": [_configmap("b", "in mars")],
            "hub": [_configmap("c", "named")],
        },
    )
    done = reconcile(Prober, SPREAD, host=host, cluster="hub", members=["eu"])
    assert done.status["hub"] == ["named", "in hub"], "the own cluster by name: its objects"
    assert done.status["eu"] == ["in eu"]
    assert done.status["mars"].startswith("denied by grants: cluster 'mars' is neither")
    assert "'hub'" in done.status["mars"] and "'eu'" in done.status["mars"]


def test_the_fake_lists_in_a_member_by_namespace_and_label() -> None:
    import capstan_guest as capstan
    from capstan_guest.testing import FakeHost

    other_ns = _configmap("x", "elsewhere", app="web")
    other_ns["metadata"]["namespace"] = "other"
    host = FakeHost(clusters={"eu": [_configmap("a", "1", app="web"), _configmap("b", "2", app="db"), other_ns]})
    host.members = ["eu"]
    with host:
        ctx = capstan.Context(capstan.EventKind.ADDED, "demo", "hi", members=["eu"])
        assert [o["metadata"]["name"] for o in ctx.api_in("eu", "v1", "ConfigMap", "demo").list()] == ["a", "b"]
        assert [o["metadata"]["name"] for o in ctx.api_in("eu", "v1", "ConfigMap").list(label_selector="app=web")] == [
            "a",
            "x",
        ]
        assert ctx.api_in("eu", "v1", "Secret", "demo").list() == []
        assert ctx.api("v1", "ConfigMap", "demo").list() == [], "the own cluster holds none of them"
        with pytest.raises(capstan.NotFound):
            ctx.api_in("eu", "v1", "ConfigMap", "demo").get("x")
        with pytest.raises(capstan.Denied):
            ctx.api_in("eu", "v1", "ConfigMap", "demo").create(_configmap("new", "no"))
    assert host.get("v1", "ConfigMap", "demo", "new", cluster="eu") is None
    assert [c[0] for c in host.calls] == ["kube.list_in", "kube.list_in", "kube.list_in", "kube.list", "kube.get_in"]


def test_refused_member_children_carry_their_cluster_in_the_fake() -> None:
    import capstan_guest as capstan
    from capstan_guest.testing import FakeHost, reconcile

    class Reporter(capstan.Controller):
        def reconcile(self, ctx: capstan.Context, obj: Dict[str, Any]) -> capstan.Outcome:
            return capstan.Outcome().status({"refused": [f"{c.cluster}/{c.name}" for c in ctx.failed_children]})

    refused = capstan.FailedChild("v1", "ConfigMap", "demo", "hi-greeting", 403, "Forbidden", "no", cluster="eu")
    done = reconcile(Reporter, SPREAD, host=FakeHost(), members=["eu"], failed_children=[refused])
    assert done.status == {"refused": ["eu/hi-greeting"]}
