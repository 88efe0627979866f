#!/usr/bin/env bash
# Measures shipping a component through a real OCI registry, for the Rust
# greeter and the Python greeter: `capstan push`, `capstan pull` (layer
# downloaded, then from the blob cache), and first serve: from starting
# `capstan run oci://…` to a Greeting that already exists being Ready,
# with the compile cache warm (the usual restart) and cold (a fresh
# $CAPSTAN_CACHE: pull and compile).
#
# Usage: KUBECONFIG=… scripts/bench-oci.sh   (a running cluster, e.g.
#   `capstan cluster up --name bench`; the greeter CRD gets installed)
# Environment: CAPSTAN (default: target/debug/capstan under CARGO_TARGET_DIR),
# CAPSTAN_GUESTS (default: tests/build-guests.sh). Starts the distribution
# registry the tests use (built once into $CAPSTAN_CACHE/registry/) on a free
# loopback port, and stops it at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${CAPSTAN_CACHE:-$HOME/.cache/capstan}
target=${CARGO_TARGET_DIR:-$cache/target}
capstan=${CAPSTAN:-$target/debug/capstan}
guests=${CAPSTAN_GUESTS:-$("$root/tests/build-guests.sh")}
version=v3.1.2
registry_bin=$cache/registry/distribution-$version/registry
if [[ ! -x $registry_bin ]]; then
  mkdir -p "$(dirname "$registry_bin")"
  GOBIN=$(dirname "$registry_bin") CGO_ENABLED=0 go install -trimpath -ldflags='-s -w' \
    "github.com/distribution/distribution/v3/cmd/registry@$version"
fi
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n  secret: bench\n' \
  "$work/storage" "$port" >"$work/config.yml"
OTEL_TRACES_EXPORTER=none "$registry_bin" serve "$work/config.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
host_pid=
cleanup() {
  [[ -n $host_pid ]] && kill "$host_pid" 2>/dev/null || true
  kill "$registry_pid" 2>/dev/null || true
  kubectl delete greeting bench-oci -n default --ignore-not-found --wait=false >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
until curl -sf "http://127.0.0.1:$port/v2/" >/dev/null; do sleep 0.1; done

now() { date +%s.%N; }
since() { python3 -c "print(f'{$(now) - $1:.2f}')"; }

for stem in greeter greeter-python; do
  ref=oci://127.0.0.1:$port/capstan/$stem:v1
  size=$(stat -c %s "$guests/$stem.wasm")
  t=$(now); "$capstan" push "$guests/$stem.wasm" "$ref" >/dev/null; push=$(since "$t")
  fresh=$work/pull-$stem
  t=$(now); CAPSTAN_CACHE=$fresh "$capstan" pull "$ref" -o "$work/$stem.wasm" >/dev/null; pull=$(since "$t")
  t=$(now); CAPSTAN_CACHE=$fresh "$capstan" pull "$ref" -o "$work/$stem.wasm" >/dev/null; cached=$(since "$t")
  cmp -s "$work/$stem.wasm" "$guests/$stem.wasm"

  serve() { # $1: CAPSTAN_CACHE for the host
    kubectl delete greeting bench-oci -n default --ignore-not-found --wait=false >/dev/null 2>&1 || true
    # Wait for the CRD (installed by the first run) before creating the Greeting.
    local t0 listen=127.0.0.1:$((port + 1))
    t0=$(now)
    CAPSTAN_CACHE=$1 "$capstan" run --install-crds --listen "$listen" "$ref" >"$work/host.log" 2>&1 &
    host_pid=$!
    until kubectl get crd greetings.examples.capstan.dev >/dev/null 2>&1; do sleep 0.05; done
    kubectl apply -f - >/dev/null <<EOF
apiVersion: examples.capstan.dev/v1alpha1
kind: Greeting
metadata: {name: bench-oci, namespace: default}
spec: {message: hello, replicas: 1}
EOF
    until [[ $(kubectl get greeting bench-oci -n default -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]; do
      sleep 0.05
    done
    since "$t0"
    kubectl delete greeting bench-oci -n default --wait=true >/dev/null 2>&1 || true
    kill "$host_pid"; wait "$host_pid" 2>/dev/null || true; host_pid=
  }
  warm=$(serve "$cache")
  cold=$(serve "$work/cold-$stem")
  echo "$stem: $size bytes; push ${push}s; pull ${pull}s (downloaded), ${cached}s (cached); first serve ${warm}s (compile cache warm), ${cold}s (cold: pull + compile)"
done
