// Structured logging through the host: lines are re-emitted as tracing
// events under the span of the current reconcile.

import { log as hostLog } from "capstan:operator/log@0.4.0";

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
    hostLog(
      level,
      message,
      Object.entries(fields).map(([key, value]) => ({ key, value: String(value) })),
    );
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
