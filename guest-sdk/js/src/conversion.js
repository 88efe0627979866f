// Conversion between the versions of a CustomResourceDefinition.
//
// Declare the CRD in the manifest (`Manifest.crd`, with every version) and
// that this component converts it (`Manifest.converts`), subclass
// `Conversion`, and export it with `exportComponent({ conversion: X })`.

import { Component } from "./component.js";
import { fromBytes, toBytes } from "./json.js";
import { log } from "./log.js";

/** Converts objects of one CRD between its versions. A fresh instance is made for every request. */
export class Conversion extends Component {
  /**
   * Converts `obj` (in its own `apiVersion`) to `desiredApiVersion` (e.g.
   * `example.com/v1`). The result must keep the object's metadata as it
   * was. Throw to fail the whole request; the message is shown to the user.
   * @param {any} obj
   * @param {string} desiredApiVersion
   * @returns {any}
   */
  convert(obj, desiredApiVersion) {
    throw new Error("a conversion must define convert()");
  }
}

/**
 * Conversion between two versions of one kind, `old` and `new` (API
 * versions, e.g. `example.com/v1alpha1` and `example.com/v1`): `obj` is in
 * either version (or already in `to`) and comes back in `to`, converted by
 * `up` (old to new) or `down` (new to old). The functions get a copy of the
 * object and return the converted one.
 *
 * What a conversion may not change is carried over: `apiVersion` is set to
 * `to`, `kind` and `metadata` come back as they were, except
 * `metadata.labels` and `metadata.annotations`, which the converted object
 * sets if it has them (the API server lets a conversion change those two
 * only): so `up` may keep a field the new version cannot represent in an
 * annotation and `down` read it back and remove it. A `status` the
 * converted object lacks is carried over as it was.
 *
 * ```js
 * between(obj, desired, up, down, { old: "example.com/v1alpha1", new: "example.com/v1" });
 * ```
 *
 * Throws a `RangeError` when the object's version or `to` is neither `old`
 * nor `new`.
 * @param {any} obj
 * @param {string} to
 * @param {(obj: any) => any} up
 * @param {(obj: any) => any} down
 * @param {{old: string, new: string}} versions
 */
export function between(obj, to, up, down, versions) {
  const source = obj?.apiVersion ?? "";
  if (source === to) return obj;
  let step;
  if (source === versions.old && to === versions.new) step = up;
  else if (source === versions.new && to === versions.old) step = down;
  else throw new RangeError(`cannot convert ${source} to ${to} (this component converts ${versions.old} and ${versions.new})`);
  const converted = step(JSON.parse(JSON.stringify(obj)));
  if (converted === null || typeof converted !== "object" || Array.isArray(converted)) {
    throw new TypeError(`converting ${source} to ${to} returned something other than an object`);
  }
  converted.apiVersion = to;
  if ("kind" in obj) converted.kind = obj.kind;
  carryOver(obj, converted);
  return converted;
}

/**
 * Puts back into `converted` what a conversion of `original` may not change
 * or did not model (see `between`).
 * @param {any} original
 * @param {any} converted
 */
function carryOver(original, converted) {
  const metadata = original.metadata;
  if (metadata !== null && typeof metadata === "object") {
    const kept = JSON.parse(JSON.stringify(metadata));
    const changed = converted.metadata;
    for (const key of ["labels", "annotations"]) {
      if (changed !== null && typeof changed === "object" && key in changed) {
        if (changed[key] === null || changed[key] === undefined) delete kept[key];
        else kept[key] = changed[key];
      }
    }
    converted.metadata = kept;
  }
  if ("status" in original && (converted.status === null || converted.status === undefined)) {
    converted.status = JSON.parse(JSON.stringify(original.status));
  }
}

/**
 * Converts every object of the request, in order; throws the message (the
 * WIT error) when one fails.
 * @param {new () => Conversion} ConversionClass
 * @param {{desiredApiVersion: string, objects: Uint8Array[]}} request
 * @returns {Uint8Array[]}
 */
export function runConvert(ConversionClass, request) {
  const conversion = new ConversionClass();
  const desired = request.desiredApiVersion;
  return request.objects.map((bytes, i) => {
    let obj;
    try {
      obj = fromBytes(bytes);
    } catch (e) {
      throw `objects[${i}] is not JSON: ${e instanceof Error ? e.message : e}`;
    }
    let converted;
    try {
      converted = conversion.convert(obj, desired);
    } catch (e) {
      if (!(e instanceof RangeError || e instanceof TypeError)) {
        log.error("unhandled exception in convert", { error: String(e), stack: e?.stack ?? "" });
      }
      throw e instanceof Error ? e.message : String(e);
    }
    const version = converted?.apiVersion;
    if (version !== desired) {
      throw `objects[${i}] came back as ${JSON.stringify(version ?? null)}, not ${JSON.stringify(desired)}`;
    }
    return toBytes(converted);
  });
}
