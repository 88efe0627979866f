// `node --import capstan-guest/testing/register --test` (or the path of this
// file): resolves the WIT imports (`capstan:operator/<interface>@0.4.0`) to
// the fake host of ./index.js, so a controller runs under Node.js's test
// runner without a component or a cluster.
import { register } from "node:module";

register("./hooks.js", import.meta.url);
