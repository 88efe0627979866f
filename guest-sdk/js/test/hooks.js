// Module resolution hook: `capstan:operator/kube@0.4.0` -> ./host/kube.js,
// `wasi:http/types@0.2.12` and `wasi:http/outgoing-handler@0.2.12` ->
// ./host/wasi-http.js.

/** @type {import("node:module").ResolveHook} */
export async function resolve(specifier, context, next) {
  const m = /^capstan:operator\/([a-z-]+)@0\.4\.0$/.exec(specifier);
  if (m) return { url: new URL(`./host/${m[1]}.js`, import.meta.url).href, shortCircuit: true };
  if (/^wasi:http\/[a-z-]+@0\.2\.\d+$/.test(specifier)) {
    return { url: new URL("./host/wasi-http.js", import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
