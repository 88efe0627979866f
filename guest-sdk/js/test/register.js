// Loaded with `node --import ./test/register.js`: resolves the WIT imports
// (`capstan:operator/<interface>@0.4.0`) to the programmable fake host in
// ./host, so the library runs under Node.js.
import { register } from "node:module";

register("./hooks.js", import.meta.url);
