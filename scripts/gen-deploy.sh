#!/usr/bin/env bash
# Regenerates the generated folders of deploy/ with `capstan gen kustomize`:
#
#   deploy/base/              the host alone: Namespace, ServiceAccount, its own
#                             RBAC, Deployment (no components)
#   deploy/examples/greeter/  an overlay adding the greeter: its CRD, its RBAC,
#                             and the image with the greeter baked in
#   deploy/examples/greeter-webhooks/
#                             an overlay adding the greeter's webhooks: its CRD
#                             with the conversion stanza, its RBAC, the Service
#                             and webhook configurations, the host's webhook
#                             flags, and the image with the component baked in
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
"${capstan[@]}" gen kustomize --namespace capstan-system -o "$out/base" >/dev/null
# The greeter (about 1.8 MB) is larger than a ConfigMap holds (1 MiB): it is
# baked into an image (`docker build -f deploy/Dockerfile --target greeter`).
"${capstan[@]}" gen kustomize "$greeter" --namespace capstan-system --base ../../base \
  --image "ghcr.io/capstan-dev/capstan-greeter:$version" --components-in-image \
  -o "$out/examples/greeter" >/dev/null
# The webhooks: baked in too (`--target greeter-webhooks`), so the overlay
# does not depend on the bytes of a local build.
"${capstan[@]}" gen kustomize "$guests/greeter-webhooks.wasm" --namespace capstan-system --base ../../base \
  --image "ghcr.io/capstan-dev/capstan-greeter-webhooks:$version" --components-in-image \
  -o "$out/examples/greeter-webhooks" >/dev/null
