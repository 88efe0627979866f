// Module resolution hook: `capstan:operator/kube@0.4.0` -> ./imports/kube.js,
// `wasi:http/types@0.2.12` -> ./imports/wasi-http.js (the FakeHost answers
// HTTP above these bindings).

/** @type {import("node:module").ResolveHook} */
export async function resolve(specifier, context, next) {
  const m = /^capstan:operator\/([a-z-]+)@0\.4\.0$/.exec(specifier);
  if (m) return { url: new URL(`./imports/${m[1]}.js`, import.meta.url).href, shortCircuit: true };
  if (/^wasi:http\/[a-z-]+@0\.2\.\d+$/.test(specifier)) {
    return { url: new URL("./imports/wasi-http.js", import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
