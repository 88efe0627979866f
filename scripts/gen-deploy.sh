#!/usr/bin/env bash
# Regenerates the generated folders of deploy/ with `capstan gen kustomize`:
#
#   deploy/base/              the host alone: Namespace, ServiceAccount, its own
#                             RBAC, Deployment (no components)
#   deploy/examples/greeter/  an overlay adding the greeter: its CRD, its RBAC,
#                             and the components ConfigMap naming the greeter's
#                             OCI reference
#   deploy/examples/greeter-webhooks/
#                             an overlay adding the greeter's webhooks: its CRD
#                             with the conversion stanza, its RBAC, the Service
#                             and webhook configurations, the host's webhook
#                             flags, and the ConfigMap naming its reference
#
# Nothing is published: the host's image and the components' references name
# the placeholder registry `registry.invalid` (a reserved domain that never
# resolves). Push your own (`capstan push`, deploy/Dockerfile) and generate
# with your references, or point the overlays at them (see deploy/README.md).
#
# Never edit those folders by hand: change the code and run this script.
# host/tests/generate.rs fails when the committed copies are stale.
#
# Usage: scripts/gen-deploy.sh [OUT]   (default: deploy/ of this checkout)
# Environment: CAPSTAN, the capstan binary (default: `cargo run`);
# CAPSTAN_GUESTS, a folder holding greeter.wasm and greeter-webhooks.wasm
# (default: built by tests/build-guests.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/deploy}

if [[ -n ${CAPSTAN:-} ]]; then
  capstan=("$CAPSTAN")
else
  capstan=(cargo run --quiet --manifest-path "$root/Cargo.toml" -p capstan-host --bin capstan --)
fi
if [[ -n ${CAPSTAN_GUESTS:-} && -f $CAPSTAN_GUESTS/greeter.wasm ]]; then
  guests=$CAPSTAN_GUESTS
else
  guests=$("$root/tests/build-guests.sh")
fi
greeter=$guests/greeter.wasm
version=$("${capstan[@]}" --version | awk '{print $2}')

rm -rf "$out/base" "$out/examples/greeter" "$out/examples/greeter-webhooks"
"${capstan[@]}" gen kustomize --namespace capstan-system -o "$out/base" >/dev/null 2>&1
# The components go by reference (`FILE=REFERENCE`: the manifest is read from
# the file, the ConfigMap names the reference), so the overlays apply with a
# plain `kubectl apply -k` and do not depend on the bytes of a local build.
registry=oci://registry.invalid/capstan
"${capstan[@]}" gen kustomize "$greeter=$registry/greeter:$version" --namespace capstan-system \
  --base ../../base -o "$out/examples/greeter" >/dev/null
"${capstan[@]}" gen kustomize "$guests/greeter-webhooks.wasm=$registry/greeter-webhooks:$version" \
  --namespace capstan-system --base ../../base -o "$out/examples/greeter-webhooks" >/dev/null
