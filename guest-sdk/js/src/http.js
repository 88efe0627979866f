// `capstan-guest/http`: HTTP(S) calls to the origins the manifest declares
// in `Manifest.egress`, through the `wasi:http/outgoing-handler` import of
// the `operator` world. A module of its own, not part of `capstan-guest`:
// only components built with the SpiderMonkey engine (componentize-js) may
// import it; the QuickJS engine cannot build a world that imports wasi:http
// (see docs/guests/javascript.md).
//
//   import { request } from "capstan-guest/http";
//   const r = request("POST", "https://hooks.example.com/notify", { json: { name: ctx.name } });
//   if (!r.ok) throw new Transient(`hooks.example.com answered ${r.status}`);
//   return new Outcome().status({ ticket: r.json().id });
//
// `request` blocks until the whole response is read. The host refuses a
// request to an origin the manifest does not declare before it connects:
// `HttpError` with code `http-request-denied`. Under the FakeHost of
// `capstan-guest/testing` no request leaves the process: `host.http(origin,
// answer)` stubs an origin, `host.requests` records every request.

import { handle } from "wasi:http/outgoing-handler@0.2.12";
import { Fields, IncomingBody, OutgoingBody, OutgoingRequest, RequestOptions } from "wasi:http/types@0.2.12";

import { fromBytes, toBytes, utf8Decode, utf8Encode } from "./json.js";

/**
 * A request that got no response: refused by the host, or failed on the way
 * (DNS, connection, TLS, timeout). Not thrown for an answer with an error
 * status: see `Response.ok`.
 */
export class HttpError extends Error {
  /** @param {string} code @param {string} [message] */
  constructor(code, message = "") {
    super(message ? `${code}: ${message}` : code);
    this.name = "HttpError";
    /**
     * What failed, as wasi:http names it: `http-request-denied` (the origin
     * is not declared in `egress`), `dns-error`, `connection-refused`,
     * `connection-timeout`, `tls-certificate-error`, ...
     */
    this.code = code;
    /** Details, when there are any. */
    this.detail = message;
  }
}

/** A request as `request` sends it (and as a FakeHost stub gets it). */
export class Request {
  /**
   * @param {string} method upper-case method
   * @param {string} url the full URL
   * @param {Record<string, string>} [headers] names in lower case
   * @param {Uint8Array} [body] empty for none
   */
  constructor(method, url, headers = {}, body = new Uint8Array()) {
    this.method = method;
    this.url = url;
    this.headers = headers;
    this.body = body;
  }

  /** `scheme://host[:port]` of the URL, without the scheme's default port. */
  get origin() {
    return originOf(this.url);
  }

  /** The body decoded as JSON. */
  json() {
    return fromBytes(this.body);
  }
}

/** A response, read whole. */
export class Response {
  /**
   * @param {number} status the HTTP status code
   * @param {Record<string, string>} [headers] names in lower case; repeated headers joined with `, `
   * @param {Uint8Array} [body]
   */
  constructor(status, headers = {}, body = new Uint8Array()) {
    this.status = status;
    this.headers = headers;
    this.body = body;
  }

  /** True for a status from 200 to 299. */
  get ok() {
    return this.status >= 200 && this.status < 300;
  }

  /** The body as UTF-8 text. */
  text() {
    return utf8Decode(this.body);
  }

  /** The body decoded as JSON; throws a SyntaxError when it is not. */
  json() {
    return fromBytes(this.body);
  }

  /**
   * A response with `value` as its JSON body, e.g. for a FakeHost stub:
   * `Response.ofJson({ id: 7 }, 201)`.
   * @param {any} value
   * @param {number} [status]
   */
  static ofJson(value, status = 200) {
    return new Response(status, { "content-type": "application/json" }, toBytes(value));
  }
}

const URL_PARTS = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\/([^/?#]*)([^?#]*)(\?[^#]*)?/;

/**
 * `scheme://host[:port]` of `url`, lower case, without the scheme's default
 * port (80 for `http`, 443 for `https`).
 * @param {string} url
 */
export function originOf(url) {
  const m = URL_PARTS.exec(url);
  if (!m) return "";
  const scheme = m[1].toLowerCase();
  const authority = m[2].replace(/^.*@/, "").toLowerCase();
  const at = /^(\[[^\]]*\]|[^:]*)(?::(\d*))?$/.exec(authority);
  const host = at ? at[1] : authority;
  const port = at?.[2] ? Number(at[2]) : undefined;
  if (port === undefined || (scheme === "http" && port === 80) || (scheme === "https" && port === 443)) {
    return `${scheme}://${host}`;
  }
  return `${scheme}://${host}:${port}`;
}

/**
 * Sends a request and reads the whole response.
 *
 * `json`: a value sent as the JSON body, with `content-type:
 * application/json` unless `headers` names one; `body`: raw bytes (or a
 * string) instead. `headers`: extra headers. `timeout`: seconds allowed to
 * connect, and then between bytes of the response (the host's limits apply
 * either way).
 *
 * Returns the `Response` whatever its status; throws `HttpError` when none
 * came, and a TypeError for a URL that is not `http` or `https`.
 * @param {string} method
 * @param {string} url
 * @param {{json?: any, body?: Uint8Array | string, headers?: Record<string, string>, timeout?: number}} [options]
 * @returns {Response}
 */
export function request(method, url, { json, body, headers = {}, timeout } = {}) {
  const m = URL_PARTS.exec(url);
  if (!m || !/^https?$/i.test(m[1]) || !m[2]) throw new TypeError(`not an http or https URL: ${url}`);
  if (json !== undefined && body !== undefined) throw new TypeError("give json or body, not both");
  /** @type {Record<string, string>} */
  const sent = {};
  for (const [k, v] of Object.entries(headers)) sent[k.toLowerCase()] = String(v);
  let bytes = new Uint8Array();
  if (json !== undefined) {
    bytes = toBytes(json);
    sent["content-type"] ??= "application/json";
  } else if (typeof body === "string") {
    bytes = utf8Encode(body);
  } else if (body !== undefined) {
    bytes = body;
  }
  return transport.send(new Request(method.toUpperCase(), url, sent, bytes), timeout);
}

const METHODS = new Set(["get", "head", "post", "put", "delete", "connect", "options", "trace", "patch"]);
// The most one blocking write may take (wasi:io says 4096 bytes).
const CHUNK = 4096;
const DISPOSE = Symbol.dispose ?? Symbol.for("dispose");

/** Drops a wasi resource now (children must go before their parents). @param {any} resource */
function drop(resource) {
  resource?.[DISPOSE]?.();
}

/** The `err` payload of what a binding threw. @param {any} e */
function payloadOf(e) {
  return e && typeof e === "object" && "payload" in e ? e.payload : e;
}

/**
 * The HttpError for a wasi:http `error-code` (`{tag: "DNS-error", val}`):
 * its code is the case's name in lower case (`dns-error`), as in the Python
 * SDK.
 * @param {any} code
 */
export function errorCode(code) {
  if (code && typeof code === "object" && typeof code.tag === "string") {
    const val = code.val;
    return new HttpError(code.tag.toLowerCase(), val === undefined ? "" : typeof val === "object" ? JSON.stringify(val) : String(val));
  }
  return new HttpError("internal-error", String(code));
}

/**
 * Sends `req` through wasi:http/outgoing-handler.
 * @param {Request} req
 * @param {number} [timeout]
 * @returns {Response}
 */
function wasiSend(req, timeout) {
  const [, scheme, authority, path, query] = /** @type {RegExpExecArray} */ (URL_PARTS.exec(req.url));
  const headers = { ...req.headers };
  // The length, not chunks: the body is known whole, and not every server takes chunks.
  if (req.body.length > 0) headers["content-length"] ??= String(req.body.length);
  let fields;
  try {
    fields = Fields.fromList(Object.entries(headers).map(([k, v]) => [k, utf8Encode(v)]));
  } catch (e) {
    throw new HttpError("http-request-header-invalid", String(payloadOf(e)?.tag ?? e));
  }
  const outgoing = new OutgoingRequest(fields);
  const lower = req.method.toLowerCase();
  try {
    outgoing.setMethod(METHODS.has(lower) ? { tag: lower } : { tag: "other", val: req.method });
  } catch {
    throw new HttpError("http-request-method-invalid", req.method);
  }
  try {
    outgoing.setScheme({ tag: scheme.toLowerCase() === "https" ? "HTTPS" : "HTTP" });
    outgoing.setAuthority(authority);
    outgoing.setPathWithQuery((path || "/") + (query ?? ""));
  } catch {
    throw new HttpError("http-request-uri-invalid", req.url);
  }
  let options;
  if (timeout !== undefined) {
    const nanos = BigInt(Math.max(0, Math.round(timeout * 1e9)));
    options = new RequestOptions();
    for (const set of ["setConnectTimeout", "setFirstByteTimeout", "setBetweenBytesTimeout"]) {
      try {
        options[set](nanos);
      } catch {
        // the host does not let guests set this one; its own limit applies
      }
    }
  }
  const outBody = outgoing.body();
  let future;
  try {
    future = handle(outgoing, options);
  } catch (e) {
    throw errorCode(payloadOf(e));
  }
  // The body goes after `handle`: the host reads it while it sends.
  if (req.body.length > 0) {
    const stream = outBody.write();
    try {
      for (let at = 0; at < req.body.length; at += CHUNK) stream.blockingWriteAndFlush(req.body.subarray(at, at + CHUNK));
    } catch {
      // the host stopped reading: the future says why
    }
    drop(stream);
  }
  try {
    OutgoingBody.finish(outBody, undefined);
  } catch {
    // ditto
  }
  let got;
  while ((got = future.get()) === undefined) {
    const pollable = future.subscribe();
    pollable.block();
    drop(pollable);
  }
  drop(future);
  // got: {tag: "ok", val: {tag: "ok", val: response}} or {..., val: {tag: "err", val: error-code}}.
  if (got.tag !== "ok") throw new HttpError("internal-error", "the response was taken before");
  if (got.val.tag !== "ok") throw errorCode(got.val.val);
  const incoming = got.val.val;
  const status = incoming.status();
  const headerFields = incoming.headers();
  const entries = headerFields.entries();
  drop(headerFields);
  const inBody = incoming.consume();
  const stream = inBody.stream();
  /** @type {Uint8Array[]} */
  const chunks = [];
  let size = 0;
  for (;;) {
    let chunk;
    try {
      chunk = stream.blockingRead(65536n);
    } catch (e) {
      if (payloadOf(e)?.tag === "closed") break;
      drop(stream);
      throw new HttpError("http-response-incomplete", "reading the body failed");
    }
    chunks.push(chunk);
    size += chunk.length;
  }
  drop(stream);
  drop(IncomingBody.finish(inBody));
  drop(incoming);
  const body = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    body.set(c, at);
    at += c.length;
  }
  /** @type {Record<string, string>} */
  const received = {};
  for (const [name, value] of entries) {
    const key = name.toLowerCase();
    const text = String.fromCharCode(...value);
    received[key] = key in received ? `${received[key]}, ${text}` : text;
  }
  return new Response(status, received, body);
}

/**
 * What sends a request: wasi:http in a component; the FakeHost of
 * `capstan-guest/testing` puts its stubs here while it is installed.
 * @internal
 */
export const transport = { send: wasiSend, wasi: wasiSend };
