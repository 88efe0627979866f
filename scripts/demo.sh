#!/usr/bin/env bash
# The main job: a real operator on a local control plane.
#
# Builds (first time only, cached) and starts etcd + kube-apiserver +
# kube-controller-manager on loopback, builds the greeter component and the
# capstan host, runs the greeter with `capstan run`, creates a Greeting, and
# shows it being reconciled: children, status, Events, an update, a delete.
# Then a second component, greeter-webhooks, serves admission and conversion
# webhooks that the API server calls: an invalid Greeting is rejected with
# the guest's message, one without replicas is stored with the default, and
# one written as v1alpha1 reads back as v1.
# Everything it started is stopped at the end (pass --keep to leave the
# control plane running; then `capstan cluster down` stops it).
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
[[ "${1:-}" == "--keep" ]] && keep=1

export CAPSTAN_CACHE=${CAPSTAN_CACHE:-$HOME/.cache/capstan}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CAPSTAN_CACHE/target}
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
command -v kubectl >/dev/null || { echo "demo: kubectl is needed to show the cluster (any version ≥ 1.27)" >&2; exit 1; }

say "control plane: capstan cluster up (the first run builds Kubernetes from source: ~6 min on 2 cores)"
cargo build --quiet -p capstan-host
capstan="$CARGO_TARGET_DIR/debug/capstan"
started_cp=0
if ! "$capstan" cluster status --name capstan >/dev/null 2>&1; then
  "$capstan" cluster up >/dev/null
  started_cp=1
fi
KUBECONFIG=$("$capstan" cluster kubeconfig)
export KUBECONFIG
k() { kubectl "$@" 2> >(grep -v -e '^Warning: version difference' -e 'WARNING: version difference' >&2); }
k version 2>/dev/null | grep -i server || true

say "build: the greeter component (wasm32-wasip2)"
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
cargo build --quiet --release --target wasm32-wasip2 -p greeter -p greeter-webhooks
greeter="$CARGO_TARGET_DIR/wasm32-wasip2/release/greeter.wasm"
webhooks="$CARGO_TARGET_DIR/wasm32-wasip2/release/greeter_webhooks.wasm"
"$capstan" inspect "$greeter" | grep -E "^(name|contract|digest|finalizer|maxConcurrency):"

say "capstan run --install-crds greeter.wasm"
log=$(mktemp -t capstan-demo.XXXXXX.log)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$capstan" run --install-crds --listen "127.0.0.1:$port" "$greeter" >"$log" 2>&1 &
host_pid=$!
hooks_pid=
cleanup() {
  kill "$host_pid" 2>/dev/null && wait "$host_pid" 2>/dev/null || true
  if [[ -n $hooks_pid ]]; then
    kill "$hooks_pid" 2>/dev/null && wait "$hooks_pid" 2>/dev/null || true
    # The configurations point at the process just stopped.
    k delete validatingwebhookconfiguration,mutatingwebhookconfiguration capstan-greeter-webhooks \
      --ignore-not-found >/dev/null 2>&1 || true
  fi
  if [[ $started_cp == 1 && $keep == 0 ]]; then "$capstan" cluster down --purge >/dev/null 2>&1 || true; fi
  echo "host log: $log"
}
trap cleanup EXIT
until k get crd greetings.examples.capstan.dev >/dev/null 2>&1; do
  kill -0 "$host_pid" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.5
done

say "create a Greeting"
k create namespace demo --dry-run=client -o yaml | k apply -f - >/dev/null
cat <<'YAML' | k apply -f -
apiVersion: examples.capstan.dev/v1alpha1
kind: Greeting
metadata: {name: hello, namespace: demo}
spec: {message: "Hello from a WebAssembly controller", replicas: 2}
YAML
k -n demo wait greeting/hello --for=condition=Ready --timeout=60s >/dev/null
k -n demo get greetings
k -n demo get configmap hello-greeting -o jsonpath='{.data.message}{"\n"}'
k -n demo get deployment hello-greeter -o custom-columns=NAME:.metadata.name,REPLICAS:.spec.replicas,OWNER:.metadata.ownerReferences[0].kind

say "the host's own view: capstan status, and a few of its metrics"
"$capstan" status --url "http://127.0.0.1:$port"
curl -fsS "http://127.0.0.1:$port/metrics" | grep -E '^capstan_(reconcile_total|controllers|guest_invocation_seconds_count)' | sed 's/^/  /'

say "change the spec: the children follow"
k -n demo patch greeting hello --type merge -p '{"spec":{"message":"Hello again","replicas":3}}'
until [[ "$(k -n demo get greeting hello -o jsonpath='{.status.observedGeneration}')" == 2 ]]; do sleep 0.5; done
k -n demo get greetings
k -n demo get deployment hello-greeter -o jsonpath='{.spec.replicas} replicas{"\n"}'

say "delete it: the finalizer runs, the children are garbage collected"
k -n demo delete greeting hello --wait=true --timeout=60s
k -n demo get events --field-selector involvedObject.kind=Greeting \
  -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message | sed 's/^/  /'

say "admission and conversion webhooks, written as guest logic (greeter-webhooks)"
hooks_log=$(mktemp -t capstan-demo-webhooks.XXXXXX.log)
hooks_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "capstan run --install-crds --webhook-listen 127.0.0.1:$hooks_port --install-webhooks greeter-webhooks.wasm"
"$capstan" run --install-crds --listen 127.0.0.1:0 --webhook-listen "127.0.0.1:$hooks_port" --install-webhooks \
  "$webhooks" >"$hooks_log" 2>&1 &
hooks_pid=$!
hooks_greeting() { # NAME SPEC
  printf 'apiVersion: webhooks.examples.capstan.dev/v1alpha1\nkind: Greeting\nmetadata: {name: %s, namespace: demo}\nspec: %s\n' "$1" "$2"
}
# The API server uses a new webhook configuration once its informer has it:
# wait until the validating webhook answers.
for _ in $(seq 1 60); do
  kill -0 "$hooks_pid" 2>/dev/null || { cat "$hooks_log"; exit 1; }
  if out=$(hooks_greeting empty '{message: ""}' | k apply --dry-run=server -f - 2>&1); then sleep 0.5; continue; fi
  grep -q "must not be empty" <<<"$out" && break
  sleep 0.5
done
echo "\$ kubectl apply  # spec: {message: \"\", replicas: 11}"
hooks_greeting rejected '{message: "", replicas: 11}' | k apply -f - 2>&1 | sed 's/^/  /' || true
echo "\$ kubectl apply  # spec: {message: \"Hello, webhooks\"} (no replicas)"
hooks_greeting defaulted '{message: "Hello, webhooks"}' | k apply -f -
echo "written as v1alpha1, defaulted: $(k -n demo get greetings.v1alpha1.webhooks.examples.capstan.dev defaulted -o jsonpath='{.spec}')"
echo "read as v1, converted:         $(k -n demo get greetings.v1.webhooks.examples.capstan.dev defaulted -o jsonpath='{.spec}')"
k -n demo delete greetings.webhooks.examples.capstan.dev defaulted >/dev/null

say "done"
