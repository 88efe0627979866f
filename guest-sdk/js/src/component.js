// The `Component` base class: what every role class declares.

/**
 * The base of the classes that serve a role besides the controller
 * (`Admission`, `Conversion`, `Scheduler`). A component without a
 * controller declares itself here: the first role class given to
 * `exportComponent` provides the manifest. With a controller, the
 * controller's `manifest()` is used and this one is not called.
 */
export class Component {
  /**
   * What this component declares: name, webhooks, conversions or scheduler,
   * CRDs, permissions. Called once when the component is loaded; must not
   * call the API.
   * @returns {import("./manifest.js").Manifest}
   */
  manifest() {
    throw new Error(`${this.constructor.name} must define manifest() when no controller is exported`);
  }
}
