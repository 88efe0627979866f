"""The :class:`Component` base class: what every role class declares."""

from __future__ import annotations

from .manifest import Manifest


class Component:
    """The base of the classes that serve a role besides the controller
    (:class:`~capstan_guest.Admission`, :class:`~capstan_guest.Conversion`,
    :class:`~capstan_guest.Scheduler`).

    A component without a controller declares itself here: the first role
    class given to :func:`~capstan_guest.export` provides the manifest. With
    a controller, the controller's :meth:`Controller.manifest
    <capstan_guest.Controller.manifest>` is used and this one is not
    called."""

    def manifest(self) -> Manifest:
        """What this component declares: name, webhooks, conversions or
        scheduler, CRDs, permissions. Called once when the component is
        loaded; must not call the API."""
        raise NotImplementedError(f"{type(self).__name__} must define manifest() when no controller is exported")
