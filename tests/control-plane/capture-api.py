#!/usr/bin/env python3
"""Captures discovery and OpenAPI v3 schemas from a running kube-apiserver.

Usage: capture-api.py <state dir of cp.sh> <kubernetes version> <output .json.gz>

Writes one gzipped JSON document, read by host/src/cluster/mock/catalog.rs:

    {"kubernetes": "v1.37.2",
     "kinds": [{"group", "version", "kind", "plural", "namespaced", "verbs",
                "subresources", "preferred", "schema"}],
     "schemas": {"<definition name>": <schema>}}

Schemas are the server's `components.schemas`, merged over every group
version, keeping only what the kinds reach; descriptions and examples are
dropped, `$ref: "#/components/schemas/X"` becomes `$ref: "X"`, and a lone
`allOf: [{$ref}]` is folded into its parent.
"""
import gzip
import json
import ssl
import sys
import urllib.request

DROP = {"description", "example", "externalDocs", "x-kubernetes-group-version-kind", "title"}
REF = "#/components/schemas/"


def main():
    state, version, out = sys.argv[1:4]
    with open(f"{state}/apiserver-port") as f:
        base = f"https://127.0.0.1:{f.read().strip()}"
    ctx = ssl.create_default_context(cafile=f"{state}/pki/ca.crt")
    ctx.load_cert_chain(f"{state}/pki/admin.crt", f"{state}/pki/admin.key")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))

    def get(path):
        with opener.open(base + path, timeout=60) as response:
            return json.load(response)

    lists = [("", "v1", True, get("/api/v1"))]
    for group in get("/apis")["groups"]:
        preferred = group["preferredVersion"]["version"]
        for v in group["versions"]:
            gv = v["groupVersion"]
            lists.append((group["name"], v["version"], v["version"] == preferred, get(f"/apis/{gv}")))

    raw = {}
    by_gvk = {}
    for path, entry in sorted(get("/openapi/v3")["paths"].items()):
        if not (path == "api/v1" or path.startswith("apis/")) or path.count("/") != (1 if path == "api/v1" else 2):
            continue
        doc = get(entry["serverRelativeURL"])
        for name, schema in doc.get("components", {}).get("schemas", {}).items():
            raw.setdefault(name, schema)
            for gvk in schema.get("x-kubernetes-group-version-kind", []):
                by_gvk.setdefault((gvk["group"], gvk["version"], gvk["kind"]), name)

    kinds = []
    for group, version_, preferred, resources in lists:
        subresources = {}
        for r in resources["resources"]:
            if "/" in r["name"]:
                parent, sub = r["name"].split("/", 1)
                subresources.setdefault(parent, []).append(sub)
        for r in resources["resources"]:
            if "/" in r["name"]:
                continue
            kinds.append({
                "group": group,
                "version": version_,
                "kind": r["kind"],
                "plural": r["name"],
                "namespaced": r["namespaced"],
                "verbs": sorted(r.get("verbs", [])),
                "subresources": sorted(subresources.get(r["name"], [])),
                "preferred": preferred,
                "schema": by_gvk.get((group, version_, r["kind"])),
            })

    def compact(node):
        if isinstance(node, list):
            return [compact(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if key in DROP:
                continue
            if key == "$ref" and isinstance(value, str) and value.startswith(REF):
                value = value[len(REF):]
            if key == "properties" and isinstance(value, dict):
                # Field names, not keywords: keep them all (JSONSchemaProps
                # has fields named description, example and title).
                out[key] = {name: compact(schema) for name, schema in value.items()}
            else:
                out[key] = compact(value)
        all_of = out.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and set(all_of[0]) == {"$ref"}:
            del out["allOf"]
            out["$ref"] = all_of[0]["$ref"]
        return out

    schemas = {}
    todo = [k["schema"] for k in kinds if k["schema"]]
    todo.append("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
    while todo:
        name = todo.pop()
        if name in schemas or name not in raw:
            continue
        schemas[name] = compact(raw[name])
        stack = [schemas[name]]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if isinstance(node.get("$ref"), str):
                    todo.append(node["$ref"])
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)

    kinds.sort(key=lambda k: (k["group"], k["kind"], k["version"]))
    data = {"kubernetes": version, "kinds": kinds, "schemas": dict(sorted(schemas.items()))}
    text = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    with open(out, "wb") as f:
        # mtime=0: the same capture gives the same bytes.
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0, filename="") as z:
            z.write(text)
    print(f"captured {len(kinds)} kinds, {len(schemas)} schemas, {len(text)} bytes of JSON -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
