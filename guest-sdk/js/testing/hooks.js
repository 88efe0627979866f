// Module resolution hook: `capstan:operator/kube@0.3.0` -> ./imports/kube.js.

/** @type {import("node:module").ResolveHook} */
export async function resolve(specifier, context, next) {
  const m = /^capstan:operator\/([a-z-]+)@0\.3\.0$/.exec(specifier);
  if (m) return { url: new URL(`./imports/${m[1]}.js`, import.meta.url).href, shortCircuit: true };
  return next(specifier, context);
}
