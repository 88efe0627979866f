import { fn } from "./fake.js";

export const get = fn("kube.get");
export const list = fn("kube.list");
export const create = fn("kube.create");
export const replace = fn("kube.replace");
export const patch = fn("kube.patch");
export const apply = fn("kube.apply");
const del = fn("kube.delete");
export { del as delete };
export const replaceStatus = fn("kube.replaceStatus");
export const patchStatus = fn("kube.patchStatus");
export const applyStatus = fn("kube.applyStatus");
export const getIn = fn("kube.getIn");
export const listIn = fn("kube.listIn");
