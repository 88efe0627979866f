// Fake wasi:http bindings (`types` and `outgoing-handler` both resolve
// here): tests set `wasi.respond` and read what the guest did in `wasi`.
const DISPOSE = Symbol.dispose ?? Symbol.for("dispose");

/** What the guest did, and what the fake answers with. */
export const wasi = { reset() {} };

wasi.reset = () => {
  Object.assign(wasi, {
    headers: undefined,
    request: undefined,
    options: undefined,
    written: [],
    finished: false,
    dropped: [],
    blocked: 0,
    /** The future's answer: `{tag: "ok", val: {tag: "ok", val: response}}` etc. */
    respond: undefined,
    /** Chunks the response body yields. */
    chunks: [],
  });
};
wasi.reset();

class Resource {
  [DISPOSE]() {
    wasi.dropped.push(this.constructor.name);
  }
}

export class Fields extends Resource {
  constructor(entries = []) {
    super();
    this.list = entries;
  }

  static fromList(entries) {
    wasi.headers = entries;
    return new Fields(entries);
  }

  entries() {
    return this.list;
  }
}

class OutputStream extends Resource {
  blockingWriteAndFlush(bytes) {
    if (bytes.length > 4096) throw new Error("more than 4096 bytes in one write");
    wasi.written.push(Uint8Array.from(bytes));
  }
}

export class OutgoingBody extends Resource {
  write() {
    return new OutputStream();
  }

  static finish(body) {
    if (wasi.dropped.at(-1) !== "OutputStream" && wasi.written.length > 0) throw new Error("the stream is still alive");
    wasi.finished = true;
  }
}

export class OutgoingRequest extends Resource {
  constructor(headers) {
    super();
    wasi.request = this;
  }

  setMethod(m) {
    this.method = m;
  }

  setScheme(s) {
    this.scheme = s;
  }

  setAuthority(a) {
    this.authority = a;
  }

  setPathWithQuery(p) {
    this.path = p;
  }

  body() {
    return new OutgoingBody();
  }
}

export class RequestOptions extends Resource {
  constructor() {
    super();
    wasi.options = this;
  }

  setConnectTimeout(d) {
    this.connect = d;
  }

  setFirstByteTimeout() {
    throw { tag: "err" }; // a host that keeps this one to itself
  }

  setBetweenBytesTimeout(d) {
    this.between = d;
  }
}

class InputStream extends Resource {
  blockingRead(n) {
    if (typeof n !== "bigint") throw new TypeError("a u64 is a BigInt");
    if (wasi.chunks.length > 0) return wasi.chunks.shift();
    throw { payload: { tag: "closed" } };
  }
}

export class IncomingBody extends Resource {
  stream() {
    return new InputStream();
  }

  static finish() {
    return new Resource();
  }
}

export class IncomingResponse extends Resource {
  constructor(status, headers) {
    super();
    this.code = status;
    this.fields = headers;
  }

  status() {
    return this.code;
  }

  headers() {
    return new Fields(this.fields);
  }

  consume() {
    return new IncomingBody();
  }
}

class Pollable extends Resource {
  block() {
    wasi.blocked += 1;
  }
}

class FutureIncomingResponse extends Resource {
  polls = 0;

  get() {
    this.polls += 1;
    return this.polls < 2 ? undefined : wasi.respond;
  }

  subscribe() {
    return new Pollable();
  }
}

export function handle(request, options) {
  wasi.handled = request;
  if (wasi.refuse) throw { payload: wasi.refuse };
  return new FutureIncomingResponse();
}
