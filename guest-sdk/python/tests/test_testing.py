"""capstan_guest.testing (the fake host authors use under pytest) and
tracebacks with source lines."""

from __future__ import annotations

import linecache
import sys
import types
from typing import Any, Dict

import pytest

GREETING: Dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "kind": "Greeting",
    "metadata": {"name": "hi", "namespace": "demo", "generation": 3, "labels": {"team": "a"}},
    "spec": {"message": "hello", "source": "settings"},
}


def _controller() -> Any:
    import capstan_guest as capstan

    class Greeter(capstan.Controller):
        def reconcile(self, ctx: capstan.Context, obj: Dict[str, Any]) -> capstan.Outcome:
            spec = obj["spec"]
            if not spec["message"]:
                raise capstan.Terminal("spec.message must not be empty", status={"phase": "Failed"})
            with ctx.span("read-settings", source=spec["source"]) as read:
                settings = ctx.api("v1", "ConfigMap", ctx.namespace).get_opt(spec["source"])
                if settings is None:
                    read.fail("no settings")
            if settings is None:
                ctx.record(capstan.Event.warning("Waiting", "Reconcile", "no settings yet"))
                return capstan.Outcome().keep_children().requeue_after(30)
            ctx.log.info("greeting", name=ctx.name)
            counting = ctx.span("count-mates")
            ctx.span("never-ended")
            mates = ctx.api("example.com/v1", "Greeting", None).list(label_selector="team=a")
            counting.end()
            child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{ctx.name}-out"},
                     "data": {"message": spec["message"], "tone": settings["data"]["tone"], "mates": str(len(mates))}}
            return (capstan.Outcome().child(child)
                    .status({"observedGeneration": obj["metadata"]["generation"]})
                    .event(capstan.Event.normal("Greeted", "Reconcile")))

    return Greeter


def test_reconcile_returns_the_outcome_as_data_and_the_fake_answers_reads(host: Any) -> None:
    from capstan_guest.testing import FakeHost, reconcile

    settings = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "demo"},
                "data": {"tone": "warm"}}
    other = dict(GREETING, metadata={"name": "other", "namespace": "elsewhere", "labels": {"team": "b"}})
    fake = FakeHost([GREETING, settings, other])
    done = reconcile(_controller(), GREETING, host=fake)
    assert done.children == [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hi-out"},
                              "data": {"message": "hello", "tone": "warm", "mates": "1"}}]
    assert done.status == {"observedGeneration": 3}
    assert done.events == [{"type": "Normal", "reason": "Greeted", "action": "Reconcile", "note": None}]
    assert done.requeue_after is None and not done.keep_children
    assert [c[0] for c in fake.calls] == ["kube.get", "kube.list"]
    assert fake.logs == [("info", "greeting", {"name": "hi"})]
    assert [(s["name"], s["parent"], s["error"], s["ended"]) for s in fake.spans] == [
        ("read-settings", None, None, True),
        ("count-mates", None, None, True),
        ("never-ended", "count-mates", None, True),
    ]
    assert fake.spans[0]["attributes"] == {"source": "settings"}


def test_a_span_ended_by_an_exception_records_it() -> None:
    import capstan_guest as capstan
    from capstan_guest.testing import FakeHost

    fake = FakeHost()
    with fake:
        with pytest.raises(ValueError):
            with capstan.log.span("parse"):
                raise ValueError("not a number")
        left = capstan.log.span("left-open")
        assert left.recording
    assert fake.spans == [
        {"name": "parse", "parent": None, "attributes": {}, "error": "ValueError: not a number", "ended": True},
        {"name": "left-open", "parent": None, "attributes": {}, "error": None, "ended": False},
    ]


def test_a_missing_read_and_a_terminal_error_reach_the_test() -> None:
    import capstan_guest as capstan
    from capstan_guest.testing import FakeHost, reconcile

    fake = FakeHost()
    waiting = reconcile(_controller(), GREETING, host=fake, event="resync")
    assert waiting.keep_children and waiting.requeue_after == 30 and waiting.children == []
    assert fake.events == [{"type": "Warning", "reason": "Waiting", "action": "Reconcile", "note": "no settings yet"}]
    assert [(s["name"], s["error"]) for s in fake.spans] == [("read-settings", "no settings")]
    empty = dict(GREETING, spec={"message": "", "source": "settings"})
    with pytest.raises(capstan.Terminal, match="must not be empty") as raised:
        reconcile(_controller(), empty)
    assert raised.value.status == {"phase": "Failed"}


def test_the_fake_stores_writes_and_answers_like_an_api_server() -> None:
    import capstan_guest as capstan
    from capstan_guest.testing import FakeHost

    with FakeHost() as fake:
        cms = capstan.Context(capstan.EventKind.ADDED, "demo", "x").api("v1", "ConfigMap", "demo")
        cms.create({"metadata": {"name": "a", "labels": {"app": "web"}}, "data": {"k": "1"}})
        with pytest.raises(capstan.AlreadyExists):
            cms.create({"metadata": {"name": "a"}})
        cms.patch("a", {"data": {"k": None, "j": "2"}})
        assert fake.get("v1", "ConfigMap", "demo", "a")["data"] == {"j": "2"}
        assert [o["metadata"]["name"] for o in cms.list(label_selector="app=web")] == ["a"]
        assert cms.list(label_selector="app!=web") == []
        cms.delete("a")
        assert cms.get_opt("a") is None
        with pytest.raises(capstan.NotFound):
            cms.delete("a")
    # Outside the with block the generated imports are back.
    from wit_world.imports import kube

    assert kube.get is not fake._kube_get


def test_sources_kept_for_tracebacks_survive_the_file_and_lose_the_path_entry(tmp_path: Any) -> None:
    from capstan_guest import tracebacks

    # A module as componentize-py loads it: from a path entry like /0/.
    source = "def boom():\n    return 1 / 0\n"
    fake_path = "/0/capstan_traceback_probe.py"
    module = types.ModuleType("capstan_traceback_probe")
    module.__file__ = fake_path
    exec(compile(source, fake_path, "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    real_open = open

    def open_probe(name: Any, *args: Any, **kwargs: Any) -> Any:
        return real_open(tmp_path / "probe.py" if name == fake_path else name, *args, **kwargs)

    (tmp_path / "probe.py").write_text(source)
    try:
        import builtins

        builtins.open, saved = open_probe, builtins.open
        try:
            assert tracebacks.keep_sources() >= 1
        finally:
            builtins.open = saved
        linecache.checkcache()  # at run time the file is not there: the entry must stay
        try:
            module.boom()
        except ZeroDivisionError:
            text = tracebacks.format_exc()
        assert 'File "capstan_traceback_probe.py", line 2, in boom' in text
        assert "return 1 / 0" in text
    finally:
        del sys.modules[module.__name__]
        linecache.cache.pop(fake_path, None)


def test_the_default_delete_lets_the_children_follow_and_an_override_may_keep_them() -> None:
    import capstan_guest as capstan
    from capstan_guest.testing import FakeHost, reconcile

    # The reconcile keeps the children while it waits; deleted, they follow.
    deleted = reconcile(_controller(), GREETING, host=FakeHost(), event="deleted")
    assert not deleted.keep_children and deleted.requeue_after == 30

    class Archive(_controller()):  # type: ignore[misc]
        def delete(self, ctx: capstan.Context, obj: Dict[str, Any]) -> capstan.Outcome:
            return capstan.Outcome().keep_children()

    assert reconcile(Archive, GREETING, host=FakeHost(), event="deleted").keep_children


def _zone_scheduler() -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "zone-scheduler-python" / "zone_scheduler.py"
    spec = importlib.util.spec_from_file_location("zone_scheduler_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ZoneSpread


def test_schedule_hands_the_policy_the_nodes_and_bound_pods_as_the_host_does() -> None:
    import capstan_guest as capstan
    from capstan_guest.testing import node, node_infos, schedule

    zone = "topology.kubernetes.io/zone"
    nodes = [node("b1", labels={zone: "b"}, cpu="2"), node("a1", labels={zone: "a"}, cpu="2")]
    busy = {"spec": {"nodeName": "a1", "containers": [{"resources": {"requests": {"cpu": "500m"}}}]}}
    infos = node_infos(nodes, [busy])
    assert [i.name for i in infos] == ["a1", "b1"], "in name order, as the host hands them"
    assert infos[0].allocatable["cpu"] == 2000 and infos[0].requested["cpu"] == 500 and infos[0].pods == 1
    assert infos[1].requested == {} and infos[1].pods == 0

    pending = {"metadata": {"name": "web", "namespace": "demo"},
               "spec": {"schedulerName": "zone-spread", "containers": [{"resources": {"requests": {"cpu": "1"}}}]}}
    spread = _zone_scheduler()
    assert schedule(spread, pending, nodes, pods=[busy]) == "b1", "the zone with fewer Pods"
    # Nothing fits: the reasons reach the test.
    with pytest.raises(capstan.Unschedulable, match="0/2 nodes are available: 2 Insufficient cpu"):
        schedule(spread, {**pending, "spec": {**pending["spec"], "containers": [
            {"resources": {"requests": {"cpu": "3"}}}]}}, nodes)
    # A cordoned, a NotReady and a tainted Node as the helper describes them.
    assert infos[0].ready() and not node("x", ready=False)["status"]["conditions"][0]["status"] == "True"
    cordoned = node_infos([node("c", unschedulable=True, taints=[{"key": "k", "effect": "NoSchedule"}])])[0]
    assert cordoned.unschedulable() and cordoned.taints() == [{"key": "k", "effect": "NoSchedule"}]


def test_schedule_runs_the_policy_under_a_fake_host_that_keeps_its_log_lines() -> None:
    import capstan_guest as capstan
    from capstan_guest.testing import FakeHost, node, schedule

    class Logged(capstan.Scheduler):
        def schedule(self, pod: Dict[str, Any], nodes: Any) -> str:
            capstan.log.debug("picked", node=nodes[0].name, candidates=len(nodes))
            return nodes[0].name

    host = FakeHost()
    assert schedule(Logged, {"spec": {}}, [node("a1")], host=host) == "a1"
    assert host.logs == [("debug", "picked", {"node": "a1", "candidates": "1"})]
    # Without a host given, a fresh fake takes the lines.
    assert schedule(Logged, {"spec": {}}, [node("b1")]) == "b1"


def test_reconcile_and_schedule_hand_the_cluster_given_to_the_code_under_test() -> None:
    import capstan_guest as capstan
    from capstan_guest.testing import node, reconcile, schedule

    clusters: list = []

    class Where(capstan.Controller):
        def reconcile(self, ctx: capstan.Context, obj: Dict[str, Any]) -> capstan.Outcome:
            clusters.append(ctx.cluster)
            return capstan.Outcome()

    reconcile(Where, GREETING, cluster="edge-3")
    reconcile(Where, GREETING)
    assert clusters == ["edge-3", "default"]

    class Named(capstan.Scheduler):
        def schedule(self, pod: Dict[str, Any], nodes: Any) -> str:
            return f"{self.cluster}-node"

    assert schedule(Named, {"spec": {}}, [node("a1")], cluster="eu") == "eu-node"
    assert schedule(Named, {"spec": {}}, [node("a1")]) == "default-node"
