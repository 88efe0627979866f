// `capstan:operator/events`, answered by the installed FakeHost.
import { current } from "../host.js";

export const record = (...args) => current().call("events.record", args);
