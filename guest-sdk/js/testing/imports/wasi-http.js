// `wasi:http/types` and `wasi:http/outgoing-handler` outside a component:
// nothing to call. The FakeHost answers `http.request` before it gets here
// (its stubs replace the transport); without one installed, a request fails.
const outside = () => {
  throw new Error("capstan-guest/testing: wasi:http runs only in a component; install a FakeHost and stub the origin with host.http(origin, answer)");
};

export const handle = outside;
export class Fields {
  static fromList() {
    outside();
  }
}
export class OutgoingRequest {
  constructor() {
    outside();
  }
}
export class OutgoingBody {
  static finish() {
    outside();
  }
}
export class IncomingBody {
  static finish() {
    outside();
  }
}
export class RequestOptions {
  constructor() {
    outside();
  }
}
