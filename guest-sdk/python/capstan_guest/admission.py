"""Admission webhooks: validate and mutate requests for objects.

Declare each webhook in the manifest with :meth:`Manifest.webhook
<capstan_guest.Manifest.webhook>`, subclass :class:`Admission` and export
it with ``capstan.export(MyController, admission=MyHooks)`` (or
``admission=`` alone). The host serves the webhooks over HTTPS, calls
:meth:`Admission.validate` or :meth:`Admission.mutate` for each request,
and turns a mutated object into the JSON Patch the API server expects::

    class Hooks(capstan.Admission):
        def validate(self, request: capstan.AdmissionRequest) -> capstan.Verdict:
            if request.object["spec"].get("replicas", 1) > 10:
                return capstan.Verdict.deny("spec.replicas must be at most 10").code(422)
            return capstan.Verdict.allow()

        def mutate(self, request: capstan.AdmissionRequest, obj: dict) -> capstan.Verdict:
            obj["spec"].setdefault("replicas", 1)
            return capstan.Verdict.allow()
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, Dict, Iterable, List, Optional, Tuple, Type

from wit_world.imports import capstan_operator_types as _wit

from .component import Component
from .kinds import GroupVersionKind, gvk
from .log import log
from .tracebacks import format_exc


class Operation(Enum):
    """An operation an admission webhook is called for."""

    CREATE = "CREATE"
    """``CREATE``."""
    UPDATE = "UPDATE"
    """``UPDATE``."""
    DELETE = "DELETE"
    """``DELETE``."""
    CONNECT = "CONNECT"
    """``CONNECT``."""

    def _into_wit(self) -> _wit.Operation:
        return _wit.Operation[self.name]

    @staticmethod
    def _from_wit(o: _wit.Operation) -> "Operation":
        return Operation[o.name]


class Webhook:
    """An admission webhook declaration, added to a manifest with
    :meth:`Manifest.webhook <capstan_guest.Manifest.webhook>`::

        Webhook.validating("validate.greetings.example.com")
            .kind("example.com/v1", "Greeting")
            .operations(Operation.CREATE, Operation.UPDATE)
            .ignore_failures()
            .timeout_seconds(5)

    Called for creates and updates unless :meth:`operations` says
    otherwise; requests that fail (an exception, the deadline) are
    rejected unless :meth:`ignore_failures` is set."""

    def __init__(self, name: str, webhook_type: _wit.WebhookType) -> None:
        self._wit = _wit.AdmissionWebhook(
            name=name,
            webhook_type=webhook_type,
            kinds=[],
            operations=[_wit.Operation.CREATE, _wit.Operation.UPDATE],
            failure_policy=_wit.FailurePolicy.FAIL,
            timeout_seconds=0,
            side_effects=_wit.SideEffects.NONE,
            namespace_selector=None,
            object_selector=None,
        )

    @staticmethod
    def validating(name: str) -> "Webhook":
        """A validating webhook named ``name``: a fully qualified DNS name
        of at least three labels, e.g. ``validate.greetings.example.com``."""
        return Webhook(name, _wit.WebhookType.VALIDATING)

    @staticmethod
    def mutating(name: str) -> "Webhook":
        """A mutating (defaulting) webhook named ``name``; see
        :meth:`validating`."""
        return Webhook(name, _wit.WebhookType.MUTATING)

    def kind(self, api_version: str, kind: str) -> "Webhook":
        """A kind (in its version) the webhook is called for."""
        self._wit.kinds.append(gvk(api_version, kind))
        return self

    def operations(self, *operations: Operation) -> "Webhook":
        """The operations it is called for (default: create and update)."""
        self._wit.operations = [o._into_wit() for o in operations]
        return self

    def ignore_failures(self) -> "Webhook":
        """Let requests through when the webhook fails (``failurePolicy:
        Ignore``); the default rejects them (``Fail``)."""
        self._wit.failure_policy = _wit.FailurePolicy.IGNORE
        return self

    def timeout_seconds(self, seconds: int) -> "Webhook":
        """How long the API server waits, 1 to 30 seconds (default 10)."""
        self._wit.timeout_seconds = seconds
        return self

    def side_effects_on_dry_run(self) -> "Webhook":
        """The webhook has side effects, except on dry runs
        (``NoneOnDryRun``)."""
        self._wit.side_effects = _wit.SideEffects.NONE_ON_DRY_RUN
        return self

    def namespace_selector(self, selector: Dict[str, Any]) -> "Webhook":
        """Only objects in namespaces matching this ``LabelSelector``
        (``{"matchLabels": {...}}``)."""
        self._wit.namespace_selector = json.dumps(selector).encode()
        return self

    def object_selector(self, selector: Dict[str, Any]) -> "Webhook":
        """Only objects matching this ``LabelSelector``."""
        self._wit.object_selector = json.dumps(selector).encode()
        return self


class UserInfo:
    """Who makes a request."""

    def __init__(self, username: str = "", uid: str = "", groups: Iterable[str] = ()) -> None:
        self.username = username
        """User name."""
        self.uid = uid
        """User UID."""
        self.groups: List[str] = list(groups)
        """Groups the user belongs to."""


class Undecodable:
    """An object of a request that does not decode to a dict: what came,
    and why. The host passes on the API server's JSON, so this is rare; it
    has the same place as in the Rust SDK, where it holds objects that do
    not match the webhook's type."""

    def __init__(self, raw: str, error: str) -> None:
        self.raw = raw
        """The object as it came (its bytes, as text)."""
        self.error = error
        """Why it does not decode."""


class AdmissionRequest:
    """One admission request, with its objects decoded to dicts. They are
    plain dicts, never checked against a type: an object stored before the
    kind gained a field simply lacks it (read fields with ``.get``)."""

    def __init__(
        self,
        webhook: str,
        operation: Operation,
        name: str = "",
        namespace: Optional[str] = None,
        object: Optional[Dict[str, Any]] = None,
        old_object: Optional[Dict[str, Any]] = None,
        sub_resource: Optional[str] = None,
        user_info: Optional[UserInfo] = None,
        dry_run: bool = False,
        uid: str = "",
        undecodable_old_object: Optional[Undecodable] = None,
        kind: Optional[GroupVersionKind] = None,
        request_kind: Optional[GroupVersionKind] = None,
    ) -> None:
        self.webhook = webhook
        """The declared webhook this request is for."""
        self.operation = operation
        """The operation."""
        self.name = name
        """The object's name (empty on a create with ``generateName``)."""
        self.namespace = namespace
        """The object's namespace; ``None`` for cluster-scoped objects."""
        self.object = object
        """The object as it would be stored; ``None`` on delete."""
        self.old_object = old_object
        """The object as it is stored; ``None`` on create, and when it does
        not decode (then :attr:`undecodable_old_object` holds it)."""
        self.undecodable_old_object = undecodable_old_object
        """The stored object when it does not decode: the request still goes
        to the handler (a delete, an update to an object that decodes)."""
        self.sub_resource = sub_resource
        """The subresource, if any."""
        self.user_info = user_info or UserInfo()
        """Who makes the request."""
        self.dry_run = dry_run
        """Nothing will be stored."""
        self.uid = uid
        """The request's UID."""
        self.kind: GroupVersionKind = kind or GroupVersionKind("", "", "")
        """The object's kind, in the version the webhook asked for (the
        version :attr:`object` and :attr:`old_object` are in)."""
        self.request_kind: GroupVersionKind = request_kind or self.kind
        """The kind in the version the user's request was made in: differs
        from :attr:`kind` when the API server converted the object for this
        webhook (``matchPolicy: Equivalent``), e.g. a webhook declared for
        ``apps/v1`` called for a request made in ``apps/v1beta2``. Name the
        user's version in messages::

            if request.request_kind.version == "v1beta1":
                verdict.warn(f"{request.request_kind.api_version} is deprecated; use {request.kind.api_version}")
        """


class Verdict:
    """The answer to an admission request: allowed or denied, with
    warnings::

        Verdict.deny("spec.replicas must be between 0 and 10").code(422)
        Verdict.allow().warn("spec.message is long")
    """

    def __init__(self, allowed: bool, message: Optional[str] = None) -> None:
        self.allowed = allowed
        """Whether the request may go on."""
        self.message = message
        """Why it was denied, shown to the user."""
        self._code: Optional[int] = None
        self.warnings: List[str] = []
        """Warnings shown to the user either way."""

    @staticmethod
    def allow() -> "Verdict":
        """Let the request go on."""
        return Verdict(True)

    @staticmethod
    def deny(message: str) -> "Verdict":
        """Reject the request; ``message`` is shown to the user."""
        return Verdict(False, message)

    def code(self, code: int) -> "Verdict":
        """The HTTP status code of a denial (400 to 599; default 403)."""
        self._code = code
        return self

    def warn(self, warning: str) -> "Verdict":
        """A warning shown to the user either way."""
        self.warnings.append(warning)
        return self

    def _into_wit(self, patched: Optional[bytes] = None) -> _wit.AdmissionResponse:
        return _wit.AdmissionResponse(
            allowed=self.allowed,
            message=self.message,
            code=self._code,
            warnings=list(self.warnings),
            patched=patched if self.allowed else None,
        )


class Admission(Component):
    """Admission logic: override the methods the manifest declares webhooks
    for (both allow by default), and export the class with
    ``capstan.export(..., admission=MyHooks)``. A fresh instance is made for
    every call. An exception is logged and fails the call (the guest
    traps): the webhook's failure policy then decides, ``Fail`` refusing
    the request, ``Ignore`` letting it through."""

    def validate(self, request: AdmissionRequest) -> Verdict:
        """Called for a validating webhook."""
        return Verdict.allow()

    def mutate(self, request: AdmissionRequest, obj: Dict[str, Any]) -> Verdict:
        """Called for a mutating webhook with the object to store (on create
        and update); change ``obj`` in place. The host sends the API server
        the JSON Patch from the object it got to the one left here."""
        return Verdict.allow()

    def mutate_without_object(self, request: AdmissionRequest) -> Verdict:
        """Called for a mutating webhook on a request without an object (a
        delete): nothing to change, only allow or deny."""
        return Verdict.allow()

    def undecodable(self, request: AdmissionRequest, obj: Undecodable) -> Verdict:
        """Called, by validating and mutating webhooks alike, instead of the
        methods above when the object to store does not decode
        (``request.object`` is ``None``). The default denies with 400 and
        the reason. An old object that does not decode never lands here:
        see :attr:`AdmissionRequest.undecodable_old_object`."""
        return Verdict.deny(obj.error).code(400)


def _decode(data: Optional[bytes], what: str) -> Tuple[Optional[Dict[str, Any]], Optional[Undecodable]]:
    if data is None:
        return None, None
    raw = bytes(data).decode("utf-8", errors="replace")
    try:
        obj = json.loads(data)
    except ValueError as e:
        return None, Undecodable(raw, f"{what} is not valid JSON: {e}")
    if not isinstance(obj, dict):
        return None, Undecodable(raw, f"{what} is not a JSON object")
    return obj, None


def run_review(admission: Type[Admission], request: _wit.AdmissionRequest) -> _wit.AdmissionResponse:
    """Decodes the request, calls ``validate`` or ``mutate`` (or
    ``undecodable`` when the object to store does not decode) and converts
    the verdict; an exception is logged and raised again (the call
    traps)."""
    obj, undecodable = _decode(request.object, "object")
    old_object, undecodable_old_object = _decode(request.old_object, "old object")
    typed = AdmissionRequest(
        webhook=request.webhook,
        operation=Operation._from_wit(request.operation),
        name=request.name,
        namespace=request.namespace,
        object=obj,
        old_object=old_object,
        sub_resource=request.sub_resource,
        user_info=UserInfo(request.user_info.username, request.user_info.uid, request.user_info.groups),
        dry_run=request.dry_run,
        uid=request.uid,
        undecodable_old_object=undecodable_old_object,
        kind=GroupVersionKind._from_wit(request.kind),
        request_kind=GroupVersionKind._from_wit(request.request_kind),
    )
    instance = admission()
    patched: Optional[bytes] = None
    try:
        if undecodable is not None:
            verdict = instance.undecodable(typed, undecodable)
        elif request.webhook_type == _wit.WebhookType.VALIDATING:
            verdict = instance.validate(typed)
        elif typed.object is None:
            verdict = instance.mutate_without_object(typed)
        else:
            obj = json.loads(json.dumps(typed.object))
            verdict = instance.mutate(typed, obj)
            patched = json.dumps(obj).encode()
    except Exception as e:
        # A failed call, not an answer: logged, then it traps, so that the
        # host answers the API server with an error and the webhook's
        # failure policy decides (as a panic does in Rust).
        log.error("unhandled exception in admission", error=repr(e), traceback=format_exc())
        raise
    if not isinstance(verdict, Verdict):
        return Verdict.deny(f"admission returned {type(verdict).__name__}, not a Verdict").code(500)._into_wit()
    return verdict._into_wit(patched)
