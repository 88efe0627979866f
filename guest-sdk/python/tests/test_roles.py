"""Unit tests of the roles besides reconcile: the component manifest,
admission, conversion and scheduling, and the "not served" defaults."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

POD: Dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "demo"},
    "spec": {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m"}}},
        ],
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "1"}}}],
        "overhead": {"memory": "1Mi"},
    },
}


def _admission_request(
    webhook_type: str, obj: Any, operation: str = "CREATE", old: Any = None, request_version: str = "v1"
) -> Any:
    from wit_world.imports import capstan_operator_types as types

    return types.AdmissionRequest(
        webhook="check.greetings.example.com",
        webhook_type=types.WebhookType[webhook_type],
        uid="u-1",
        kind=types.GroupVersionKind(group="example.com", version="v1", kind="Greeting"),
        request_kind=types.GroupVersionKind(group="example.com", version=request_version, kind="Greeting"),
        sub_resource=None,
        name="hi",
        namespace="demo",
        operation=types.Operation[operation],
        object=None if obj is None else (obj if isinstance(obj, bytes) else json.dumps(obj).encode()),
        old_object=None if old is None else (old if isinstance(old, bytes) else json.dumps(old).encode()),
        user_info=types.UserInfo(username="ada", uid="1", groups=["devs"]),
        dry_run=False,
    )


def _greeting(replicas: Any = None) -> Dict[str, Any]:
    spec: Dict[str, Any] = {"message": "hello"}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "example.com/v1", "kind": "Greeting", "metadata": {"name": "hi"}, "spec": spec}


def _hooks() -> Any:
    import capstan_guest as capstan

    class Hooks(capstan.Admission):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("hooks").webhook(
                capstan.Webhook.validating("check.greetings.example.com").kind("example.com/v1", "Greeting")
            )

        def validate(self, request: capstan.AdmissionRequest) -> capstan.Verdict:
            assert request.user_info.username == "ada" and request.operation == capstan.Operation.CREATE
            if request.object["spec"].get("replicas", 1) > 10:
                return capstan.Verdict.deny("spec.replicas must be at most 10").code(422)
            return capstan.Verdict.allow().warn("looks fine")

        def mutate(self, request: capstan.AdmissionRequest, obj: Dict[str, Any]) -> capstan.Verdict:
            if obj["spec"].get("replicas") == "boom":
                raise RuntimeError("a bug")
            obj["spec"].setdefault("replicas", 1)
            return capstan.Verdict.allow()

    return Hooks


def test_a_controller_alone_serves_reconcile_only_and_the_other_roles_answer_not_served() -> None:
    import capstan_guest as capstan
    from componentize_py_types import Err
    from wit_world.imports import capstan_operator_types as types

    class Greeter(capstan.Controller):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("greeter").primary("example.com/v1", "Greeting")

    exports = capstan.export(Greeter)
    manifest = exports.Controller().manifest()
    assert manifest.controller.name == "greeter"
    assert manifest.roles == types.Roles(reconcile=True, admission=[], conversion=[], scheduler=None)
    response = exports.Admission().review(_admission_request("VALIDATING", _greeting()))
    assert (response.allowed, response.code) == (False, 500)
    assert response.message == "this component does not serve admission"
    with pytest.raises(Err) as converted:
        exports.Conversion().convert(types.ConversionRequest(desired_api_version="example.com/v1", objects=[]))
    assert converted.value.value == "this component does not serve conversion"
    with pytest.raises(Err) as scheduled:
        exports.Scheduler().schedule(
            types.ScheduleRequest(pod=json.dumps(POD).encode(), nodes=[], removed=[], cluster="default")
        )
    assert scheduled.value.value.reasons == ["this component does not serve scheduling"]


def test_a_component_without_a_controller_takes_its_manifest_from_the_first_role() -> None:
    import capstan_guest as capstan
    from componentize_py_types import Err
    from wit_world.imports import capstan_operator_types as types

    exports = capstan.export(admission=_hooks())
    manifest = exports.Controller().manifest()
    assert not manifest.roles.reconcile
    assert (manifest.controller.primary.group, manifest.controller.primary.kind) == ("example.com", "Greeting")
    webhook = manifest.roles.admission[0]
    assert webhook.webhook_type == types.WebhookType.VALIDATING
    assert webhook.operations == [types.Operation.CREATE, types.Operation.UPDATE]
    assert webhook.failure_policy == types.FailurePolicy.FAIL
    request = types.ReconcileRequest(
        event=types.EventKind.ADDED, object=b"{}", failed_children=[], cluster="default", members=[]
    )
    with pytest.raises(Err) as failed:
        exports.Controller().reconcile(request)
    assert failed.value.value.kind == types.FailureKind.TERMINAL
    assert failed.value.value.message == "this component does not serve reconcile"
    with pytest.raises(TypeError):
        capstan.export()
    with pytest.raises(TypeError):
        capstan.export(admission=int)  # type: ignore[arg-type]


def test_the_manifest_declares_webhooks_conversions_and_a_scheduler_and_fills_the_primary() -> None:
    import capstan_guest as capstan
    from wit_world.imports import capstan_operator_types as types

    webhook = (
        capstan.Webhook.mutating("default.greetings.example.com")
        .kind("example.com/v1", "Greeting")
        .operations(capstan.Operation.CREATE)
        .ignore_failures()
        .timeout_seconds(5)
        .side_effects_on_dry_run()
        .object_selector({"matchLabels": {"app": "web"}})
    )
    w = capstan.Manifest("m").webhook(webhook)._into_component(False).roles.admission[0]
    assert (w.webhook_type, w.operations, w.failure_policy) == (
        types.WebhookType.MUTATING,
        [types.Operation.CREATE],
        types.FailurePolicy.IGNORE,
    )
    assert (w.timeout_seconds, w.side_effects) == (5, types.SideEffects.NONE_ON_DRY_RUN)
    assert json.loads(w.object_selector) == {"matchLabels": {"app": "web"}} and w.namespace_selector is None

    scheduling = capstan.Manifest("s").scheduler("zone-spread")._into_component(False)
    assert scheduling.roles.scheduler == types.SchedulerManifest(name="zone-spread")
    assert (scheduling.controller.primary.version, scheduling.controller.primary.kind) == ("v1", "Pod")

    crd = {"spec": {"names": {"kind": "Greeting"}, "versions": [{"name": "v1alpha1"}, {"name": "v1"}]}}
    converting = capstan.Manifest("c").crd(crd).converts("example.com/v1", "Greeting")._into_component(True)
    assert converting.roles.conversion == [types.GroupKind(group="example.com", kind="Greeting")]
    primary = converting.controller.primary
    assert (primary.group, primary.version, primary.kind) == ("example.com", "v1alpha1", "Greeting")
    assert converting.roles.reconcile

    explicit = capstan.Manifest("e").primary("apps/v1", "Deployment").scheduler("x")._into_component(True)
    assert explicit.controller.primary.kind == "Deployment"


def test_validate_returns_the_verdict_with_its_code_and_warnings(host: Any) -> None:
    import capstan_guest as capstan

    review = capstan.export(admission=_hooks()).Admission().review
    allowed = review(_admission_request("VALIDATING", _greeting(3)))
    assert (allowed.allowed, allowed.warnings, allowed.patched) == (True, ["looks fine"], None)
    denied = review(_admission_request("VALIDATING", _greeting(11)))
    assert (denied.allowed, denied.code, denied.message) == (False, 422, "spec.replicas must be at most 10")


def test_mutate_changes_the_object_in_place_and_the_answer_carries_it(host: Any) -> None:
    import capstan_guest as capstan

    review = capstan.export(admission=_hooks()).Admission().review
    response = review(_admission_request("MUTATING", _greeting()))
    assert response.allowed
    assert json.loads(response.patched)["spec"] == {"message": "hello", "replicas": 1}
    deleted = review(_admission_request("MUTATING", None, operation="DELETE", old=_greeting()))
    assert deleted.allowed and deleted.patched is None


def test_a_request_that_does_not_decode_is_denied_400_and_an_exception_fails_the_call(host: Any) -> None:
    import capstan_guest as capstan

    review = capstan.export(admission=_hooks()).Admission().review
    bad = review(_admission_request("VALIDATING", b"not json"))
    assert (bad.allowed, bad.code) == (False, 400)
    assert bad.message is not None and bad.message.startswith("object is not valid JSON")
    # Raised on (the guest traps), so that the failure policy decides.
    with pytest.raises(RuntimeError, match="a bug"):
        review(_admission_request("MUTATING", _greeting("boom")))
    assert any(call[0] == "log.log" and "unhandled exception in admission" in call for call in host.calls)


def test_an_old_object_that_does_not_decode_goes_to_the_handler_raw(host: Any) -> None:
    import capstan_guest as capstan

    seen: List[Any] = []

    class Hooks(capstan.Admission):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("hooks").webhook(
                capstan.Webhook.validating("check.greetings.example.com").kind("example.com/v1", "Greeting")
            )

        def validate(self, request: capstan.AdmissionRequest) -> capstan.Verdict:
            seen.append((request.operation, request.old_object, request.undecodable_old_object))
            return capstan.Verdict.allow()

    review = capstan.export(admission=Hooks).Admission().review
    for webhook_type in ("VALIDATING", "MUTATING"):
        deleted = review(_admission_request(webhook_type, None, operation="DELETE", old=b"[1]"))
        assert deleted.allowed, deleted.message
    updated = review(_admission_request("VALIDATING", _greeting(2), operation="UPDATE", old=b"not json"))
    assert updated.allowed, updated.message
    operation, old, undecodable = seen[-1]
    assert (operation, old) == (capstan.Operation.UPDATE, None)
    assert undecodable.raw == "not json" and undecodable.error.startswith("old object is not valid JSON")
    # The object to store must decode, unless the author says otherwise.
    refused = review(_admission_request("MUTATING", b"[1]", operation="UPDATE", old=_greeting()))
    assert (refused.allowed, refused.code, refused.message) == (False, 400, "object is not a JSON object")


def test_an_author_may_answer_for_an_object_to_store_that_does_not_decode(host: Any) -> None:
    import capstan_guest as capstan

    class Hooks(capstan.Admission):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("hooks").webhook(
                capstan.Webhook.validating("check.greetings.example.com").kind("example.com/v1", "Greeting")
            )

        def undecodable(self, request: capstan.AdmissionRequest, obj: capstan.Undecodable) -> capstan.Verdict:
            assert request.object is None
            return capstan.Verdict.allow().warn(f"let through: {obj.raw}")

    review = capstan.export(admission=Hooks).Admission().review
    response = review(_admission_request("MUTATING", b"[1]"))
    assert (response.allowed, response.warnings, response.patched) == (True, ["let through: [1]"], None)


def _up(obj: Dict[str, Any]) -> Dict[str, Any]:
    spec = obj.pop("spec")
    obj["spec"] = {"greeting": spec["message"]}
    return obj


def _down(obj: Dict[str, Any]) -> Dict[str, Any]:
    spec = obj.pop("spec")
    obj["spec"] = {"message": spec["greeting"]}
    return obj


def test_between_converts_up_and_down_and_keeps_the_metadata() -> None:
    import capstan_guest as capstan

    old = {"apiVersion": "example.com/v1alpha1", "kind": "Greeting", "metadata": {"name": "hi"}}
    old["spec"] = {"message": "x"}
    versions = {"old": "example.com/v1alpha1", "new": "example.com/v1"}
    new = capstan.between(old, "example.com/v1", _up, _down, **versions)
    assert new == {**old, "apiVersion": "example.com/v1", "spec": {"greeting": "x"}}
    assert old["spec"] == {"message": "x"}, "the input is not changed"
    assert capstan.between(new, "example.com/v1alpha1", _up, _down, **versions) == old
    assert capstan.between(old, "example.com/v1alpha1", _up, _down, **versions) is old
    with pytest.raises(ValueError, match="cannot convert example.com/v1alpha1 to example.com/v2"):
        capstan.between(old, "example.com/v2", _up, _down, **versions)


def test_between_keeps_what_a_version_cannot_represent_in_an_annotation_and_the_status() -> None:
    import capstan_guest as capstan

    old = {
        "apiVersion": "example.com/v1alpha1",
        "kind": "Greeting",
        "metadata": {"name": "hi", "uid": "u", "annotations": {"a": "1"}},
        "spec": {"message": "x", "colour": "red"},
        "status": {"ready": True},
    }

    def keep(obj: Dict[str, Any]) -> Dict[str, Any]:
        # v1 has no colour: kept in an annotation; new metadata, no status.
        annotations = {**obj["metadata"]["annotations"], "colour": obj["spec"]["colour"]}
        return {"metadata": {"name": "ignored", "annotations": annotations}, "spec": {"greeting": obj["spec"]["message"]}}

    def restore(obj: Dict[str, Any]) -> Dict[str, Any]:
        colour = obj["metadata"]["annotations"].pop("colour")
        obj["spec"] = {"message": obj["spec"]["greeting"], "colour": colour}
        return obj

    versions = {"old": "example.com/v1alpha1", "new": "example.com/v1"}
    new = capstan.between(old, "example.com/v1", keep, restore, **versions)
    assert new["metadata"] == {"name": "hi", "uid": "u", "annotations": {"a": "1", "colour": "red"}}
    assert new["status"] == {"ready": True}
    assert capstan.between(new, "example.com/v1alpha1", keep, restore, **versions) == old


def test_convert_answers_every_object_in_order_or_one_message() -> None:
    import capstan_guest as capstan
    from componentize_py_types import Err
    from wit_world.imports import capstan_operator_types as types

    class Versions(capstan.Conversion):
        def convert(self, obj: Dict[str, Any], desired_api_version: str) -> Dict[str, Any]:
            if obj.get("spec", {}).get("message") == "wrong":
                return {**obj, "apiVersion": "example.com/v9"}
            versions = {"old": "example.com/v1alpha1", "new": "example.com/v1"}
            return capstan.between(obj, desired_api_version, _up, _down, **versions)

    convert = capstan.export(conversion=Versions).Conversion().convert

    def request(*objects: Any) -> Any:
        data = [o if isinstance(o, bytes) else json.dumps(o).encode() for o in objects]
        return types.ConversionRequest(desired_api_version="example.com/v1", objects=data)

    a = {"apiVersion": "example.com/v1alpha1", "kind": "Greeting", "metadata": {"name": "a"}, "spec": {"message": "1"}}
    b = {"apiVersion": "example.com/v1", "kind": "Greeting", "metadata": {"name": "b"}, "spec": {"greeting": "2"}}
    out = [json.loads(o) for o in convert(request(a, b))]
    assert [(o["metadata"]["name"], o["spec"]) for o in out] == [("a", {"greeting": "1"}), ("b", {"greeting": "2"})]
    with pytest.raises(Err) as not_json:
        convert(request(a, b"{"))
    assert not_json.value.value.startswith("objects[1] is not JSON")
    with pytest.raises(Err) as unknown:
        convert(request({**a, "apiVersion": "example.com/v0"}))
    assert unknown.value.value.startswith("cannot convert example.com/v0")
    with pytest.raises(Err) as wrong:
        convert(request({**a, "spec": {"message": "wrong"}}))
    assert wrong.value.value == "objects[0] came back as 'example.com/v9', not 'example.com/v1'"


def test_quantities_parse_to_milli_units() -> None:
    from capstan_guest import parse_quantity

    assert parse_quantity("500m") == 500
    assert parse_quantity("2") == 2000
    assert parse_quantity("1.5") == 1500
    assert parse_quantity("0.1") == 100
    assert parse_quantity("1Ki") == 1_024_000
    assert parse_quantity("128Mi") == 128 * 1024 * 1024 * 1000
    assert parse_quantity("1G") == 1_000_000_000_000
    assert parse_quantity("1e3") == 1_000_000
    assert parse_quantity("0.1m") == 1
    assert parse_quantity("lots") is None
    assert parse_quantity("1Qi") is None


def test_pod_requests_sum_containers_take_the_largest_init_container_and_add_overhead() -> None:
    from capstan_guest import pod_requests

    assert pod_requests(POD) == {"cpu": 1000, "memory": 1024**3 * 1000 + 1024**2 * 1000, "pods": 1000}
    assert pod_requests({"kind": "Pod"}) == {}


def test_node_info_tells_what_is_free_what_fits_and_its_labels() -> None:
    from capstan_guest import NodeInfo

    node = NodeInfo("n1", {"metadata": {"labels": {"zone": "a"}}}, {"cpu": 2000, "pods": 110_000}, {"cpu": 1500})
    assert (node.free("cpu"), node.free("memory"), node.free("pods")) == (500, 0, 110_000)
    assert node.fits({"cpu": 500, "pods": 1000}) and not node.fits({"cpu": 501})
    assert node.fits({"memory": 0})
    assert (node.label("zone"), node.label("rack"), NodeInfo("n2", {}, {}, {}).label("zone")) == ("a", None, None)


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1", "labels": {"zone": "a", "disk": "ssd"}},
    "spec": {"unschedulable": True, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
    "status": {
        "conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        ]
    },
}


def test_node_info_answers_labels_cordon_taints_and_conditions_like_the_rust_sdk() -> None:
    from capstan_guest import NodeInfo

    node = NodeInfo("n1", NODE, {}, {})
    assert node.labels() == {"zone": "a", "disk": "ssd"}
    assert node.unschedulable()
    assert node.taints() == [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    assert (node.condition("MemoryPressure"), node.condition("DiskPressure")) == ("False", None)
    assert node.ready()
    bare = NodeInfo("n2", {"metadata": {"name": "n2"}}, {}, {})
    assert not bare.unschedulable() and not bare.ready()
    assert bare.labels() == {} and bare.taints() == [] and bare.condition("Ready") is None
    not_ready = NodeInfo("n3", {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}, {}, {})
    assert not not_ready.ready() and not_ready.condition("Ready") == "Unknown"


GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
BARE_TAINT = {"key": "maintenance", "effect": "NoExecute"}

# A toleration, and whether it tolerates GPU_TAINT and BARE_TAINT (the same
# cases as the Rust SDK's).
TOLERATION_CASES = [
    ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, True, False),
    ({"key": "dedicated", "value": "gpu"}, True, False),
    ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, False, False),
    ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}, False, False),
    ({"key": "dedicated", "operator": "Exists"}, True, False),
    ({"key": "maintenance", "operator": "Exists", "effect": ""}, False, True),
    ({"key": "maintenance", "operator": "Equal"}, False, True),
    ({"key": "maintenance", "operator": "Equal", "value": ""}, False, True),
    ({"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}, False, False),
    ({"operator": "Exists"}, True, True),
    ({"operator": "Exists", "effect": "NoExecute"}, False, True),
    ({"key": "dedicated", "operator": "Gt", "value": "1"}, False, False),
    ({"key": "dedicated", "operator": "Exists", "tolerationSeconds": 300}, True, False),
]


@pytest.mark.parametrize("toleration,of_gpu,of_bare", TOLERATION_CASES)
def test_tolerations_match_taints_by_key_operator_value_and_effect_as_kubernetes_does(
    toleration: Dict[str, Any], of_gpu: bool, of_bare: bool
) -> None:
    from capstan_guest import tolerates

    pod = {"spec": {"tolerations": [toleration]}}
    assert (tolerates(pod, GPU_TAINT), tolerates(pod, BARE_TAINT)) == (of_gpu, of_bare)


def test_a_pod_without_tolerations_tolerates_no_taint() -> None:
    from capstan_guest import tolerates

    assert not tolerates({}, GPU_TAINT)
    assert not tolerates({"spec": {"tolerations": None}}, GPU_TAINT)
    assert not tolerates({"spec": {"tolerations": []}}, BARE_TAINT)


def test_the_untolerated_taint_is_the_first_no_schedule_or_no_execute_taint_the_pod_does_not_tolerate() -> None:
    from capstan_guest import NodeInfo

    soft = {"key": "spot", "value": "true", "effect": "PreferNoSchedule"}
    tainted = NodeInfo("n1", {"spec": {"taints": [soft, GPU_TAINT, BARE_TAINT]}}, {}, {})

    def tolerating(*tolerations: Dict[str, Any]) -> Dict[str, Any]:
        return {"spec": {"tolerations": list(tolerations)}}

    assert tainted.untolerated_taint(tolerating()) == GPU_TAINT
    assert tainted.untolerated_taint(tolerating({"key": "dedicated", "value": "gpu"})) == BARE_TAINT
    both = tolerating({"key": "dedicated", "value": "gpu"}, {"key": "maintenance", "operator": "Exists"})
    assert tainted.untolerated_taint(both) is None, "PreferNoSchedule is not a filter"
    assert NodeInfo("n2", {}, {}, {}).untolerated_taint(tolerating()) is None
    assert NodeInfo("n3", NODE, {}, {}).untolerated_taint({})["key"] == "k"


def test_a_node_from_the_host_is_decoded_only_when_the_policy_reads_it(host: Any) -> None:
    import capstan_guest as capstan
    from componentize_py_types import Err
    from wit_world.imports import capstan_operator_types as types

    seen: List[capstan.NodeInfo] = []

    class ByName(capstan.Scheduler):
        """Reads the names and free room of every Node, the JSON of one."""

        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("by-name").scheduler("by-name")

        def schedule(self, pod: Dict[str, Any], nodes: List[capstan.NodeInfo]) -> str:
            seen.extend(nodes)
            fitting = [n for n in nodes if n.fits(capstan.pod_requests(pod))]
            picked = fitting[-1]
            if pod["metadata"].get("labels", {}).get("read") == "all":
                for n in nodes:
                    n.labels()
            return picked.name if picked.label("zone") == "b" else "none"

    def wit_node(name: str, json_bytes: bytes) -> Any:
        room = [types.ResourceAmount(name=r, milli=1 << 50) for r in ("cpu", "memory", "pods")]
        return types.NodeInfo(name=name, node=json_bytes, allocatable=room, requested=[], pods=0)

    good = {"metadata": {"name": "b1", "labels": {"zone": "b"}}}
    # The sentinel is not JSON: a policy that never reads it never decodes it
    # (the host hands the Nodes over in name order).
    request = types.ScheduleRequest(
        pod=json.dumps(POD).encode(),
        nodes=[wit_node("a-sentinel", b"not json"), wit_node("b1", json.dumps(good).encode())],
        removed=[],
        cluster="default",
    )
    schedule = capstan.export(scheduler=ByName).Scheduler().schedule
    assert schedule(request) == "b1"
    assert [n.name for n in seen] == ["a-sentinel", "b1"]
    assert seen[0]._node is None, "the Node the policy did not read stays undecoded"
    assert seen[1].node == good

    reads_all = {**POD, "metadata": {"name": "p", "labels": {"read": "all"}}}
    # Nothing changed: the Nodes are held from the request before.
    reading = types.ScheduleRequest(pod=json.dumps(reads_all).encode(), nodes=[], removed=[], cluster="default")
    with pytest.raises(Err) as raised:
        schedule(reading)
    [reason] = raised.value.value.reasons
    assert reason.startswith("Node a-sentinel does not decode: "), reason


def _node(name: str, cpu: int, zone: str) -> Any:
    from wit_world.imports import capstan_operator_types as types

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": zone}}}
    return types.NodeInfo(
        name=name,
        node=json.dumps(node).encode(),
        allocatable=[
            types.ResourceAmount(name="cpu", milli=cpu),
            types.ResourceAmount(name="memory", milli=8 * 1024**3 * 1000),
            types.ResourceAmount(name="pods", milli=110_000),
        ],
        requested=[types.ResourceAmount(name="cpu", milli=0)],
        pods=0,
    )


def test_schedule_returns_a_node_name_or_the_reasons_it_is_unschedulable(host: Any) -> None:
    import capstan_guest as capstan
    from componentize_py_types import Err
    from wit_world.imports import capstan_operator_types as types

    class FirstFit(capstan.Scheduler):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("first-fit").scheduler("first-fit")

        def schedule(self, pod: Dict[str, Any], nodes: List[capstan.NodeInfo]) -> Any:
            mode = pod["metadata"].get("labels", {}).get("mode")
            if mode == "return":
                return capstan.Unschedulable("returned")
            if mode == "bug":
                raise KeyError("zone")
            needed = capstan.pod_requests(pod)
            for node in nodes:
                if node.fits(needed) and node.label("zone") == "b":
                    return node.name
            raise capstan.Unschedulable(f"{len(nodes)} nodes have too little cpu", "or are in the wrong zone")

    exports = capstan.export(scheduler=FirstFit)
    assert exports.Controller().manifest().roles.scheduler == types.SchedulerManifest(name="first-fit")
    schedule = exports.Scheduler().schedule

    def request(pod: Dict[str, Any], *nodes: Any) -> Any:
        """A request to a fresh instance, which gets every Node."""
        capstan.scheduler._held.clear()
        return types.ScheduleRequest(pod=json.dumps(pod).encode(), nodes=list(nodes), removed=[], cluster="default")

    assert schedule(request(POD, _node("a1", 4000, "a"), _node("b1", 500, "b"), _node("b2", 4000, "b"))) == "b2"
    with pytest.raises(Err) as raised:
        schedule(request(POD, _node("b1", 500, "b")))
    assert raised.value.value.reasons == ["1 nodes have too little cpu", "or are in the wrong zone"]
    with pytest.raises(Err) as returned:
        schedule(request({**POD, "metadata": {"name": "p", "labels": {"mode": "return"}}}))
    assert returned.value.value.reasons == ["returned"]
    with pytest.raises(Err) as bug:
        schedule(request({**POD, "metadata": {"name": "p", "labels": {"mode": "bug"}}}))
    assert bug.value.value.reasons == ["unhandled KeyError: 'zone'"]


def test_a_scheduler_holds_the_nodes_between_decisions_and_applies_each_request_s_changes(host: Any) -> None:
    import capstan_guest as capstan
    from componentize_py_types import Err
    from wit_world.imports import capstan_operator_types as types

    seen: List[List[capstan.NodeInfo]] = []

    class Lister(capstan.Scheduler):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("lister").scheduler("lister")

        def schedule(self, pod: Dict[str, Any], nodes: List[capstan.NodeInfo]) -> str:
            seen.append(nodes)
            nodes.sort(key=lambda n: n.name, reverse=True)  # the policy's own copy
            return ",".join(f"{n.name}:{n.pods}" for n in sorted(nodes, key=lambda n: n.name))

    schedule = capstan.export(scheduler=Lister).Scheduler().schedule

    def request(nodes: List[Any], removed: List[str], cluster: str = "default") -> Any:
        return types.ScheduleRequest(pod=json.dumps(POD).encode(), nodes=nodes, removed=removed, cluster=cluster)

    def node(name: str, pods: int) -> Any:
        return types.NodeInfo(name=name, node=b'{"metadata": {}}', allocatable=[], requested=[], pods=pods)

    assert schedule(request([node("a", 0), node("b", 0), node("c", 0)], [])) == "a:0,b:0,c:0"
    assert [n.name for n in seen[-1]] == ["c", "b", "a"], "sorted by the policy"
    assert schedule(request([], [])) == "a:0,b:0,c:0", "nothing changed"
    assert [n.name for n in seen[-1]] == ["c", "b", "a"]
    seen[-1][0].node  # decoded once
    assert schedule(request([node("aa", 0), node("b", 2)], ["c"])) == "a:0,aa:0,b:2"
    assert schedule(request([node("z", 1)], [], cluster="east")) == "z:1", "east holds its own"
    assert schedule(request([], ["a"])) == "aa:0,b:2"
    with pytest.raises(Err):
        # A Pod that does not decode: the changes are taken all the same.
        schedule(types.ScheduleRequest(pod=b"{", nodes=[node("d", 0)], removed=[], cluster="default"))
    assert schedule(request([], [])) == "aa:0,b:2,d:0"


def test_the_export_style_of_contract_0_2_0_names_the_change() -> None:
    import capstan_guest as capstan

    class Noop(capstan.Controller):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("noop").primary("v1", "ConfigMap")

    # What componentize-py does with `Controller = capstan.export(Noop)`.
    Controller = capstan.export(Noop)
    with pytest.raises(TypeError, match=r"Controller, Admission, Conversion, Scheduler = capstan\.export"):
        Controller()


def test_an_admission_request_has_the_webhooks_kind_and_the_users_request_kind(host: Any) -> None:
    import capstan_guest as capstan

    seen: list = []

    class Hooks(capstan.Admission):
        def validate(self, request: capstan.AdmissionRequest) -> capstan.Verdict:
            seen.append((request.kind, request.request_kind))
            verdict = capstan.Verdict.allow()
            if request.request_kind.version == "v1beta1":
                verdict.warn(f"{request.request_kind.api_version} is deprecated; use {request.kind.api_version}")
            return verdict

    review = capstan.export(admission=Hooks).Admission().review
    same = review(_admission_request("VALIDATING", _greeting()))
    converted = review(_admission_request("VALIDATING", _greeting(), request_version="v1beta1"))
    v1 = capstan.GroupVersionKind("example.com", "v1", "Greeting")
    assert seen == [(v1, v1), (v1, capstan.GroupVersionKind("example.com", "v1beta1", "Greeting"))]
    assert same.warnings == []
    assert converted.warnings == ["example.com/v1beta1 is deprecated; use example.com/v1"]
    assert capstan.GroupVersionKind.of("v1", "Pod") == capstan.GroupVersionKind("", "v1", "Pod")
    assert capstan.GroupVersionKind.of("v1", "Pod").api_version == "v1"
    made = capstan.AdmissionRequest("w", capstan.Operation.CREATE, kind=v1)
    assert made.request_kind == v1, "without a request kind, it is the webhook's kind"


def test_the_scheduler_learns_the_cluster_of_the_pod(host: Any) -> None:
    import capstan_guest as capstan
    from wit_world.imports import capstan_operator_types as types

    class PerCluster(capstan.Scheduler):
        def manifest(self) -> capstan.Manifest:
            return capstan.Manifest("per-cluster").scheduler("per-cluster")

        def schedule(self, pod: Dict[str, Any], nodes: List[capstan.NodeInfo]) -> str:
            return f"{self.cluster}-node"

    schedule = capstan.export(scheduler=PerCluster).Scheduler().schedule
    assert schedule(types.ScheduleRequest(pod=json.dumps(POD).encode(), nodes=[], removed=[], cluster="edge-3")) == "edge-3-node"
    assert schedule(types.ScheduleRequest(pod=json.dumps(POD).encode(), nodes=[], removed=[], cluster="default")) == "default-node"
