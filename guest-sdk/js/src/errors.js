// Errors: from the Kubernetes API (`ApiError` and its subclasses) and from a
// reconcile (`Transient`, `Terminal`).

import { toBytes } from "./json.js";

/**
 * A failed call to the Kubernetes API through the host. `status` is set for
 * errors the API server answered, `undefined` otherwise.
 */
export class ApiError extends Error {
  /**
   * @param {string} message the host's or API server's message
   * @param {{code: number, reason: string, message: string}} [status]
   * @param {string} [prefix]
   */
  constructor(message, status, prefix = "api error") {
    super(`${prefix}: ${message}`);
    this.name = new.target.name;
    /** The host's or API server's message. */
    this.detail = message;
    /** What the API server said, if it answered. */
    this.status = status;
  }

  /** True for 404. */
  get isNotFound() {
    return this instanceof NotFound;
  }

  /** True for 409 (already exists or conflict). */
  get isConflict() {
    return this instanceof Conflict || this instanceof AlreadyExists;
  }
}

/** The controller's grants do not allow the call; nothing was sent. */
export class Denied extends ApiError {
  /** @param {string} message */
  constructor(message) {
    super(message, undefined, "denied by grants");
  }
}

/** 404: the object or kind does not exist. */
export class NotFound extends ApiError {
  /** @param {string} message @param {import("../index").ApiStatus} [status] */
  constructor(message, status) {
    super(message, status, "not found");
  }
}

/** 409: create of a name that exists. */
export class AlreadyExists extends ApiError {
  /** @param {string} message @param {import("../index").ApiStatus} [status] */
  constructor(message, status) {
    super(message, status, "already exists");
  }
}

/** 409: stale resourceVersion or apply conflict. */
export class Conflict extends ApiError {
  /** @param {string} message @param {import("../index").ApiStatus} [status] */
  constructor(message, status) {
    super(message, status, "conflict");
  }
}

/** 422: the object failed validation. */
export class Invalid extends ApiError {
  /** @param {string} message @param {import("../index").ApiStatus} [status] */
  constructor(message, status) {
    super(message, status, "invalid");
  }
}

/** 403 from the API server. */
export class Forbidden extends ApiError {
  /** @param {string} message @param {import("../index").ApiStatus} [status] */
  constructor(message, status) {
    super(message, status, "forbidden");
  }
}

/** The request was malformed before it was sent. */
export class BadRequest extends ApiError {
  /** @param {string} message */
  constructor(message) {
    super(message, undefined, "bad request");
  }
}

/** The API server could not be reached. */
export class Unavailable extends ApiError {
  /** @param {string} message */
  constructor(message) {
    super(message, undefined, "api server unavailable");
  }
}

/** Any other API error. */
export class OtherApiError extends ApiError {
  /** @param {string} message @param {import("../index").ApiStatus} [status] */
  constructor(message, status) {
    super(message, status, `api error ${status ? status.code : 0}`);
  }
}

/** The host answered with JSON that could not be decoded. */
export class Decode extends ApiError {
  /** @param {string} message */
  constructor(message) {
    super(message, undefined, "cannot decode the host's answer");
  }
}

/**
 * Why a reconcile gave up: throw `Transient` or `Terminal`. Either may carry
 * the `status` to write (the status field only, as in `Outcome.status`; any
 * JSON value) and `events` to record. The host keeps the children as they
 * are, writes the status (merged with its own `Reconciled=False` condition
 * for a terminal failure) and records the events:
 *
 * ```js
 * throw new Terminal("spec.schedule is not a cron expression", {
 *   status: { conditions: setCondition(conditions, "Ready", "False", "InvalidSpec", "bad schedule") },
 *   events: [Event.warning("InvalidSpec", "Validate")],
 * });
 * ```
 */
export class ReconcileError extends Error {
  /**
   * @param {string} message what went wrong
   * @param {{status?: unknown, events?: Iterable<import("./outcome.js").Event>}} [options]
   */
  constructor(message, options = {}) {
    super(message);
    this.name = new.target.name;
    /** The status to write with the failure; `undefined` leaves it. */
    this.status = undefined;
    /** Events to record with the failure. @type {import("./outcome.js").Event[]} */
    this.events = [];
    /** @internal the status as JSON bytes */
    this.statusJson = undefined;
    if (options.status !== undefined) this.withStatus(options.status);
    for (const event of options.events ?? []) this.withEvent(event);
  }

  /**
   * Sets the status to write with the failure (encoded to JSON right away:
   * a value JSON cannot represent throws here). Returns the error.
   * @param {unknown} status
   */
  withStatus(status) {
    if (JSON.stringify(status) === undefined) throw new TypeError("the status of a failure must be a JSON value");
    this.statusJson = toBytes(status);
    this.status = status;
    return this;
  }

  /**
   * Adds an event to record with the failure. Returns the error.
   * @param {import("./outcome.js").Event} event
   */
  withEvent(event) {
    if (!event || typeof event !== "object" || !event.wit) {
      throw new TypeError("expected an Event (Event.normal or Event.warning)");
    }
    this.events.push(event);
    return this;
  }

  /** True if the host waits for the object to change. */
  get isTerminal() {
    return this instanceof Terminal;
  }
}

/** A failure worth retrying: the host retries with exponential backoff. */
export class Transient extends ReconcileError {}

/**
 * A failure retrying will not fix (e.g. an invalid spec): the host records a
 * Warning event with this message and waits for the object to change.
 */
export class Terminal extends ReconcileError {}

const byTag = {
  "not-found": NotFound,
  "already-exists": AlreadyExists,
  conflict: Conflict,
  invalid: Invalid,
  forbidden: Forbidden,
  other: OtherApiError,
};

/**
 * The `ApiError` for an error of the `kube` interface (`{tag, val}`).
 * @param {{tag: string, val: any}} error
 * @returns {ApiError}
 */
export function apiError(error) {
  switch (error.tag) {
    case "denied":
      return new Denied(error.val);
    case "bad-request":
      return new BadRequest(error.val);
    case "unavailable":
      return new Unavailable(error.val);
    default: {
      const Class = byTag[error.tag] ?? OtherApiError;
      const status = { code: error.val.code, reason: error.val.reason, message: error.val.message };
      return new Class(status.message, status);
    }
  }
}

/**
 * The reconcile error an escaped API error stands for: terminal for a denial
 * by grants, transient otherwise.
 * @param {ApiError} error
 * @returns {ReconcileError}
 */
export function fromApiError(error) {
  return error instanceof Denied ? new Terminal(error.message) : new Transient(error.message);
}
