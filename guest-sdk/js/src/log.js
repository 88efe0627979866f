// Structured logging through the host: lines are re-emitted as tracing
// events under the span of the current reconcile.

import { endSpan, log as hostLog, startSpan } from "capstan:operator/log@0.4.0";

/** @param {Record<string, unknown>} fields */
function pairs(fields) {
  return Object.entries(fields).map(([key, value]) => ({ key, value: String(value) }));
}

/**
 * A span opened with `log.span` (or `ctx.span`). Ending it ends every span
 * opened inside it that is still open; one still open when the callback
 * returns ends with it.
 */
export class Span {
  /** @param {bigint} id */
  constructor(id) {
    /** @private */
    this.id = id;
    /** @private @type {string | undefined} */
    this.error = undefined;
  }

  /** Whether the host opened the span (false past its limits). */
  get recording() {
    return this.id !== 0n;
  }

  /** Marks the span failed with `message`; it ends later. @param {string} message */
  fail(message) {
    this.error = String(message);
  }

  /** Ends the span (again: nothing). */
  end() {
    if (this.id !== 0n) {
      endSpan(this.id, this.error);
      this.id = 0n;
    }
  }
}

/**
 * Logger handed out as `ctx.log` (and exported as `log`). Keep messages
 * constant and put data in the fields; values are rendered with `String`:
 *
 * ```js
 * ctx.log.info("configmap applied", { name: "web", keys: 3 });
 * ```
 */
export class Log {
  /**
   * Emits a line at `level` (`trace`, `debug`, `info`, `warn` or `error`).
   * @param {"trace" | "debug" | "info" | "warn" | "error"} level
   * @param {string} message
   * @param {Record<string, unknown>} [fields]
   */
  log(level, message, fields = {}) {
    hostLog(level, message, pairs(fields));
  }

  /**
   * Opens a span named `name` inside the innermost span still open (else
   * the host's span of this call), with `attributes` rendered with
   * `String`; end it with `span.end()`. The host bounds what it keeps
   * (names of up to 64 characters of `[A-Za-z0-9_.:/-]`, 16 attributes, 128
   * spans per call, 16 open at once); past that it opens nothing and the
   * span records nothing (`span.recording`).
   * @param {string} name
   * @param {Record<string, unknown>} [attributes]
   * @returns {Span}
   */
  span(name, attributes = {}) {
    return new Span(startSpan(name, pairs(attributes)));
  }

  /**
   * Runs `fn` in a span named `name` and ends it; an exception marks the
   * span failed with its message, and is thrown on:
   *
   * ```js
   * const desired = ctx.log.inSpan("render", { template: "index" }, () => render(spec));
   * ```
   * @template T
   * @param {string} name
   * @param {Record<string, unknown>} attributes
   * @param {() => T} fn
   * @returns {T}
   */
  inSpan(name, attributes, fn) {
    const span = this.span(name, attributes);
    try {
      return fn();
    } catch (e) {
      span.fail(e instanceof Error ? `${e.name}: ${e.message}` : String(e));
      throw e;
    } finally {
      span.end();
    }
  }

  /** Emits a trace line. @param {string} message @param {Record<string, unknown>} [fields] */
  trace(message, fields) {
    this.log("trace", message, fields);
  }

  /** Emits a debug line. @param {string} message @param {Record<string, unknown>} [fields] */
  debug(message, fields) {
    this.log("debug", message, fields);
  }

  /** Emits an info line. @param {string} message @param {Record<string, unknown>} [fields] */
  info(message, fields) {
    this.log("info", message, fields);
  }

  /** Emits a warning. @param {string} message @param {Record<string, unknown>} [fields] */
  warn(message, fields) {
    this.log("warn", message, fields);
  }

  /** Emits an error line. @param {string} message @param {Record<string, unknown>} [fields] */
  error(message, fields) {
    this.log("error", message, fields);
  }
}

/** The logger; the same object as `ctx.log`. */
export const log = new Log();
