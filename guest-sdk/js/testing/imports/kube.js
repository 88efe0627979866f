// `capstan:operator/kube`, answered by the installed FakeHost.
import { current } from "../host.js";

export const get = (...args) => current().call("kube.get", args);
export const list = (...args) => current().call("kube.list", args);
export const create = (...args) => current().call("kube.create", args);
export const replace = (...args) => current().call("kube.replace", args);
export const patch = (...args) => current().call("kube.patch", args);
export const apply = (...args) => current().call("kube.apply", args);
const del = (...args) => current().call("kube.delete", args);
export { del as delete };
export const replaceStatus = (...args) => current().call("kube.replaceStatus", args);
export const patchStatus = (...args) => current().call("kube.patchStatus", args);
export const applyStatus = (...args) => current().call("kube.applyStatus", args);
export const getIn = (...args) => current().call("kube.getIn", args);
export const listIn = (...args) => current().call("kube.listIn", args);
