// The fake host: tests replace its functions; calls are recorded.

/** Host calls made, as [function, ...args]. */
export const calls = [];

/** The implementations of the imports; tests assign to them. */
export const impl = {};

/** Resets calls and implementations. */
export function reset() {
  calls.length = 0;
  for (const key of Object.keys(impl)) delete impl[key];
}

/**
 * An import that records its call and runs `impl[name]`.
 * @param {string} name
 */
export function fn(name) {
  return (...args) => {
    calls.push([name, ...args]);
    const f = impl[name];
    if (!f) throw new Error(`fake host: ${name} not implemented`);
    return f(...args);
  };
}

/** What the bindings throw for an `err` result. */
export class ComponentError extends Error {
  /** @param {unknown} payload */
  constructor(payload) {
    super("component error");
    this.payload = payload;
  }
}
