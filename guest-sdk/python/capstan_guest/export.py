""":func:`export`: the component's four exports, from the classes that
serve its roles."""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Type

from componentize_py_types import Err
from wit_world import exports as _exports
from wit_world.imports import capstan_operator_types as _wit

from .admission import Admission, Verdict, run_review
from .component import Component
from .controller import Controller, run_reconcile
from .conversion import Conversion, run_convert
from .scheduler import Scheduler, run_schedule
from .tracebacks import keep_sources


def _not_served(role: str) -> str:
    return f"this component does not serve {role}"


class Exports(NamedTuple):
    """The classes componentize-py looks for in the app module, one per
    exported interface of the ``operator`` world."""

    Controller: type
    """The ``capstan:operator/controller`` export."""
    Admission: type
    """The ``capstan:operator/admission`` export."""
    Conversion: type
    """The ``capstan:operator/conversion`` export."""
    Scheduler: type
    """The ``capstan:operator/scheduler`` export."""

    def __call__(self, *args: object, **kwargs: object) -> None:
        """What componentize-py does to an app written for the SDK of
        contract 0.2.0 (``Controller = capstan.export(X)``): says what
        changed instead of ``'Exports' object is not callable``."""
        raise TypeError(
            "capstan.export() returns the component's four exports since contract 0.3.0: "
            "unpack them, `Controller, Admission, Conversion, Scheduler = capstan.export(...)`, "
            "instead of `Controller = capstan.export(...)`"
        )


def export(
    controller: Optional[Type[Controller]] = None,
    *,
    admission: Optional[Type[Admission]] = None,
    conversion: Optional[Type[Conversion]] = None,
    scheduler: Optional[Type[Scheduler]] = None,
) -> Exports:
    """Exports the component's roles, naming the class that serves each
    (any mix). componentize-py looks for classes named ``Controller``,
    ``Admission``, ``Conversion`` and ``Scheduler`` in the app module, so
    unpack the result into those names, once, at the end of it::

        # A controller:
        Controller, Admission, Conversion, Scheduler = capstan.export(Greeter)
        # A controller that also serves webhooks and converts its CRD:
        Controller, Admission, Conversion, Scheduler = capstan.export(
            Greeter, admission=GreetingHooks, conversion=GreetingVersions)
        # No controller: the first role class declares the manifest.
        Controller, Admission, Conversion, Scheduler = capstan.export(scheduler=ZoneSpread)

    The manifest comes from the controller, else from the first of
    ``admission``, ``conversion`` and ``scheduler`` given; its
    ``roles.reconcile`` is set when a controller is given. Roles not given
    answer "not served"; the host never calls them, since the manifest does
    not declare them.

    It also keeps the source of the app and the SDK for tracebacks (see
    :mod:`capstan_guest.tracebacks`), so call it at import time, as above."""
    for given, base, role in (
        (controller, Controller, "controller"),
        (admission, Admission, "admission"),
        (conversion, Conversion, "conversion"),
        (scheduler, Scheduler, "scheduler"),
    ):
        if given is not None and not (isinstance(given, type) and issubclass(given, base)):
            raise TypeError(f"{role} must be a subclass of capstan_guest.{base.__name__}, not {given!r}")
    declaring: List[type] = [c for c in (controller, admission, conversion, scheduler) if c is not None]
    if not declaring:
        raise TypeError("export needs at least one role: a controller, admission, conversion or scheduler")
    first = declaring[0]
    serves_reconcile = controller is not None

    class ControllerExport(_exports.Controller):
        """The ``capstan:operator/controller`` export."""

        def manifest(self) -> _wit.ComponentManifest:
            """The manifest of the controller, or of the first role class."""
            instance: Component = first()  # type: ignore[assignment]
            return instance.manifest()._into_component(serves_reconcile)

        def reconcile(self, request: _wit.ReconcileRequest) -> _wit.Outcome:
            """Calls the controller's callback for the request's event."""
            if controller is None:
                raise Err(
                    _wit.Failure(
                        kind=_wit.FailureKind.TERMINAL, message=_not_served("reconcile"), status=None, events=[]
                    )
                )
            return run_reconcile(controller, request)

    class AdmissionExport(_exports.Admission):
        """The ``capstan:operator/admission`` export."""

        def review(self, request: _wit.AdmissionRequest) -> _wit.AdmissionResponse:
            """Calls ``validate`` or ``mutate``."""
            if admission is None:
                return Verdict.deny(_not_served("admission")).code(500)._into_wit()
            return run_review(admission, request)

    class ConversionExport(_exports.Conversion):
        """The ``capstan:operator/conversion`` export."""

        def convert(self, request: _wit.ConversionRequest) -> List[bytes]:
            """Calls ``convert`` for every object."""
            if conversion is None:
                raise Err(_not_served("conversion"))
            return run_convert(conversion, request)

    class SchedulerExport(_exports.Scheduler):
        """The ``capstan:operator/scheduler`` export."""

        def schedule(self, request: _wit.ScheduleRequest) -> str:
            """Calls ``schedule``."""
            if scheduler is None:
                raise Err(_wit.Unschedulable(reasons=[_not_served("scheduling")]))
            return run_schedule(scheduler, request)

    for cls, role in (
        (ControllerExport, "Controller"),
        (AdmissionExport, "Admission"),
        (ConversionExport, "Conversion"),
        (SchedulerExport, "Scheduler"),
    ):
        cls.__name__ = cls.__qualname__ = f"{role}Export[{first.__name__}]"
    # export() runs while componentize-py builds, with the sources readable:
    # keep them for tracebacks at run time.
    keep_sources()
    return Exports(ControllerExport, AdmissionExport, ConversionExport, SchedulerExport)
