// http.request through wasi:http, on the fake bindings of ./host/wasi-http.js.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { http } from "../src/index.js";
import { toBytes } from "../src/json.js";
import { IncomingResponse, wasi } from "./host/wasi-http.js";

beforeEach(() => {
  wasi.reset();
  wasi.refuse = undefined;
});

const bytes = (s) => new TextEncoder().encode(s);

test("a request goes out through the outgoing handler and the response is read whole", () => {
  const headers = [
    ["Content-Type", bytes("application/json")],
    ["Vary", bytes("a")],
    ["vary", bytes("b")],
  ];
  wasi.respond = { tag: "ok", val: { tag: "ok", val: new IncomingResponse(201, headers) } };
  wasi.chunks = [bytes('{"id":'), bytes(" 7}")];
  const big = { data: "x".repeat(10000) };
  const r = http.request("put", "https://api.example.com:8443/v1/items?id=7", {
    json: big,
    headers: { "X-Token": "t" },
    timeout: 2.5,
  });
  const sent = wasi.request;
  assert.deepEqual(sent.method, { tag: "put" });
  assert.deepEqual(sent.scheme, { tag: "HTTPS" });
  assert.equal(sent.authority, "api.example.com:8443");
  assert.equal(sent.path, "/v1/items?id=7");
  assert.deepEqual(
    wasi.headers.map(([k, v]) => [k, new TextDecoder().decode(v)]),
    [
      ["x-token", "t"],
      ["content-type", "application/json"],
      ["content-length", String(toBytes(big).length)],
    ],
  );
  const written = Buffer.concat(wasi.written.map((c) => Buffer.from(c)));
  assert.deepEqual(new Uint8Array(written), toBytes(big));
  assert.equal(wasi.written.length, 3, "the body goes in chunks of at most 4096 bytes");
  assert.ok(wasi.finished, "the body is finished after its stream is dropped");
  assert.equal(wasi.handled, sent);
  assert.equal(wasi.options.connect, 2_500_000_000n);
  assert.equal(wasi.options.between, 2_500_000_000n);
  assert.equal(wasi.blocked, 1, "the guest waits on the future's pollable until the response is there");
  assert.equal(r.status, 201);
  assert.ok(r.ok);
  assert.deepEqual(r.json(), { id: 7 });
  assert.deepEqual(r.headers, { "content-type": "application/json", vary: "a, b" });
  assert.ok(wasi.dropped.indexOf("InputStream") < wasi.dropped.indexOf("IncomingResponse"), "child resources go first");
});

test("an error code from the future or from handle is an HttpError with the wasi code", () => {
  wasi.respond = { tag: "ok", val: { tag: "err", val: { tag: "HTTP-request-denied" } } };
  assert.throws(
    () => http.request("GET", "http://metadata.internal/"),
    (e) => e instanceof http.HttpError && e.code === "http-request-denied",
  );
  assert.equal(wasi.options, undefined);
  assert.deepEqual(wasi.written, []);
  wasi.refuse = { tag: "DNS-error", val: { rcode: "NXDOMAIN", infoCode: undefined } };
  assert.throws(
    () => http.request("GET", "https://nowhere.example.com"),
    (e) => e instanceof http.HttpError && e.code === "dns-error" && /NXDOMAIN/.test(e.message),
  );
});

test("bad urls and bodies are refused before sending", () => {
  assert.throws(() => http.request("GET", "ftp://example.com/file"), /not an http or https URL/);
  assert.throws(() => http.request("POST", "https://example.com", { json: {}, body: "x" }), /json or body/);
  assert.equal(wasi.request, undefined);
});

test("origins drop the default port and keep others", () => {
  assert.equal(http.originOf("https://API.example.com:443/x?y"), "https://api.example.com");
  assert.equal(http.originOf("http://example.com:80"), "http://example.com");
  assert.equal(http.originOf("http://alertmanager.monitoring.svc:9093/api/v2/alerts"), "http://alertmanager.monitoring.svc:9093");
  assert.equal(http.originOf("https://[::1]:8443/"), "https://[::1]:8443");
});
