#!/usr/bin/env bash
# Capstan's local Kubernetes control plane: etcd + kube-apiserver (+ optionally
# kube-controller-manager), built from Go modules, run on loopback only.
#
#   cp.sh build                        build the binaries once (cached by version)
#   cp.sh build-scheduler              build kube-scheduler once too (for the scheduler
#                                      benchmark); prints its path
#   cp.sh up [--with-controller-manager]
#                                      start on random free loopback ports, wait until
#                                      ready, write a kubeconfig; prints its path last
#   cp.sh down                         stop exactly what `up` started, remove its state
#   cp.sh status                       exit 0 if a started control plane answers /readyz
#   cp.sh restart-apiserver [--down-for S]
#                                      kill kube-apiserver, wait S seconds, start it again (same port)
#   cp.sh kubeconfig                   print the kubeconfig path of the running one
#   cp.sh env                          print `export KUBECONFIG=...` for eval
#
# Environment:
#   CAPSTAN_CACHE        cache root for binaries    (default: ~/.cache/capstan)
#   CAPSTAN_CP_DIR       state dir of a running one (default: /tmp/capstan-control-plane)
#   CAPSTAN_CP_TIMEOUT   seconds each component may take to become ready (default: 120)
#   CAPSTAN_CP_ETCD_PORT, CAPSTAN_CP_ETCD_PEER_PORT, CAPSTAN_CP_APISERVER_PORT
#                        pin a port instead of picking a free one (no retry if taken)
#
# See README.md beside this script.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache_root=${CAPSTAN_CACHE:-$HOME/.cache/capstan}
bin_dir="$cache_root/control-plane/kubernetes-$KUBERNETES_VERSION-etcd-$ETCD_VERSION"
state_dir=${CAPSTAN_CP_DIR:-/tmp/capstan-control-plane}
timeout=${CAPSTAN_CP_TIMEOUT:-120}
binaries=(etcd kube-apiserver kube-controller-manager)

# Loopback only: never let curl (or anything it starts) use a proxy.
export NO_PROXY='*' no_proxy='*'
unset HTTPS_PROXY https_proxy HTTP_PROXY http_proxy ALL_PROXY all_proxy

say() { printf 'control-plane: %s\n' "$*" >&2; }
die() { printf 'control-plane: error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- build
build_one() { # <builder module dir> <package> <output name> <ldflags>
  local module=$1 package=$2 name=$3 ldflags=$4 log="$bin_dir/build-$3.log"
  if [[ -x "$bin_dir/$name" ]]; then return 0; fi
  say "building $name from $package (first time only; log: $log)"
  local start=$SECONDS
  if ! (cd "$module" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod \
        go build -trimpath -ldflags "$ldflags" -o "$bin_dir/$name.tmp" "$package") >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    rm -f "$bin_dir/$name.tmp"
    die "step build: building $name failed; read $log"
  fi
  mv "$bin_dir/$name.tmp" "$bin_dir/$name"
  say "built $name in $((SECONDS - start)) s"
}

all_built() {
  local b
  for b in "${binaries[@]}"; do [[ -x "$bin_dir/$b" ]] || return 1; done
}

# Linker flags that stamp the Kubernetes version into a binary.
version_ldflags() {
  local major minor kv="-s -w"
  major=${KUBERNETES_VERSION#v}; major=${major%%.*}
  minor=${KUBERNETES_VERSION#v*.}; minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kv+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    kv+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$kv"
}

# kube-scheduler, from the same builder module, beside the others (only the
# scheduler benchmark needs it, so `build` does not build it).
cmd_build_scheduler() {
  [[ $# -eq 0 ]] || die "usage: cp.sh build-scheduler"
  if [[ ! -x "$bin_dir/kube-scheduler" ]]; then
    command -v go >/dev/null || die "step build: no Go toolchain on PATH, and $bin_dir has no prebuilt kube-scheduler"
    mkdir -p "$bin_dir"
    build_one "$here/kubernetes" k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler "$(version_ldflags)"
  fi
  echo "$bin_dir/kube-scheduler"
}

cmd_build() {
  [[ $# -eq 0 ]] || die "usage: cp.sh build"
  if all_built; then echo "$bin_dir"; return 0; fi
  command -v go >/dev/null || die "step build: no Go toolchain on PATH, and $bin_dir has no prebuilt binaries (install Go ≥ 1.26 from https://go.dev/dl or your package manager)"
  mkdir -p "$bin_dir"
  local kv
  kv=$(version_ldflags)
  build_one "$here/etcd" go.etcd.io/etcd/server/v3 etcd "-s -w"
  build_one "$here/kubernetes" k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$kv"
  build_one "$here/kubernetes" k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$kv"
  echo "$bin_dir"
}

# ---------------------------------------------------------------- helpers
need() { # <command> <why>
  command -v "$1" >/dev/null || die "step ${step:-setup}: '$1' is not on PATH ($2)"
}

# A free loopback TCP port: bind port 0 and read what the kernel gave.
free_port() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    return
  fi
  # No python: random high port that nothing answers on (a start that then
  # fails with "address already in use" is retried by the caller).
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  die "step ports: could not find a free loopback port"
}

# Is this PID alive and running the named binary? (Guards against PID reuse.)
# argv[0] is the binary; argv[1] too when it is a script run by an interpreter.
pid_is() { # <pid> <name>
  local pid=$1 name=$2 arg
  [[ -n "$pid" && -r /proc/$pid/cmdline ]] || return 1
  while IFS= read -r -d '' arg; do
    [[ "$(basename -- "$arg")" == "$name" ]] && return 0
  done < <(head -z -n 2 "/proc/$pid/cmdline" 2>/dev/null)
  return 1
}

# Is this PID a live child of this very shell (started by this `up`)?
own_child() { # <pid> <name>
  local stat state ppid
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }           # fields after "(comm) "
  read -r state ppid _ <<<"$stat"
  [[ "$ppid" == "$$" && "$state" != Z ]]
}

# Send TERM, wait up to 10 s, then KILL; only while <check> says it is ours.
stop_pid() { # <pid> <name> [check: pid_is | own_child]
  local pid=$1 name=$2 check=${3:-pid_is}
  "$check" "$pid" "$name" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do
    "$check" "$pid" "$name" || return 0
    sleep 0.1
  done
  say "$name (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 50); do "$check" "$pid" "$name" || return 0; sleep 0.1; done
}

recorded() { # prints "<name> <pid>" for each recorded process
  local f
  [[ -d "$state_dir/pids" ]] || return 0
  for f in "$state_dir"/pids/*; do
    [[ -f "$f" ]] || continue
    printf '%s %s\n' "$(basename -- "$f")" "$(cat "$f")"
  done
}

curl_api() { # <path> [curl args...]  authenticated as the admin user
  local path=$1; shift
  curl --silent --show-error --fail --max-time 5 --noproxy '*' \
    --cacert "$state_dir/pki/ca.crt" --cert "$state_dir/pki/admin.crt" --key "$state_dir/pki/admin.key" \
    "$@" "https://127.0.0.1:$(cat "$state_dir/apiserver-port")$path"
}

healthy() {
  [[ -f "$state_dir/kubeconfig" && -f "$state_dir/apiserver-port" ]] || return 1
  local name pid any=0
  while read -r name pid; do
    any=1
    pid_is "$pid" "$name" || return 1
  done < <(recorded)
  [[ $any == 1 ]] || return 1
  [[ "$(curl_api /readyz 2>/dev/null)" == ok ]]
}

# Serialise up/down on one state dir (two test runs may call `up` at once).
lock_state() {
  command -v flock >/dev/null || return 0
  mkdir -p "$(dirname -- "$state_dir")"
  exec 9>"$state_dir.lock"
  if ! flock -n 9; then
    say "waiting for another cp.sh working on $state_dir"
    flock -w "$timeout" 9 || die "step lock: another cp.sh held $state_dir.lock for ${timeout} s"
  fi
}

# ---------------------------------------------------------------- up
step=
started_names=()
started_pids=()
created_state=0
up_done=0

on_exit() {
  local rc=$?
  [[ $up_done == 1 ]] && return 0
  trap - EXIT INT TERM
  if ((${#started_pids[@]})); then
    say "cleaning up after failed step '${step:-?}': stopping ${started_names[*]}"
    local i
    for ((i = ${#started_pids[@]} - 1; i >= 0; i--)); do
      stop_pid "${started_pids[$i]}" "${started_names[$i]}" own_child
      rm -f "$state_dir/pids/${started_names[$i]}"
    done
  fi
  if [[ $created_state == 1 ]]; then
    # Keep the logs for reading (the messages above name them); `up` or `down` removes them.
    rm -rf "$state_dir/etcd" "$state_dir/kubeconfig" "$state_dir/pids"
    say "nothing left running; logs kept in $state_dir/logs (removed by the next 'cp.sh up' or 'cp.sh down')"
  fi
  exit $((rc == 0 ? 1 : rc))
}

# Start a binary in the background with its log and stdin/stdout detached.
launch() { # <name> <args...>
  local name=$1; shift
  local log="$state_dir/logs/$name.log"
  "$bin_dir/$name" "$@" </dev/null >"$log" 2>&1 9>&- &
  local pid=$!
  started_names+=("$name")
  started_pids+=("$pid")
  echo "$pid" >"$state_dir/pids/$name"
}

# Wait for <probe> to succeed; fail early if the process died.
# Returns 2 if it died because its port was taken.
wait_ready() { # <name> <what> <probe command...>
  local name=$1 what=$2; shift 2
  local pid log="$state_dir/logs/$name.log" deadline=$((SECONDS + timeout))
  pid=$(cat "$state_dir/pids/$name")
  while ! "$@" >/dev/null 2>&1; do
    if ! own_child "$pid" "$name"; then
      local code=0
      wait "$pid" 2>/dev/null || code=$?
      if grep -q 'address already in use' "$log"; then return 2; fi
      tail -n 15 "$log" >&2
      die "step start-$name: $name exited during startup (exit code $code); read $log"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 15 "$log" >&2
      die "step start-$name: $name not $what after ${timeout} s (CAPSTAN_CP_TIMEOUT); read $log"
    fi
    sleep 0.2
  done
}

# Forget the last started process after it died (so a retry can start anew).
forget_last() {
  local n=$((${#started_pids[@]} - 1))
  rm -f "$state_dir/pids/${started_names[$n]}"
  started_pids=("${started_pids[@]:0:n}")
  started_names=("${started_names[@]:0:n}")
}

port_for() { # <env var name> → pinned value or a free port
  local pinned=${!1:-}
  if [[ -n "$pinned" ]]; then echo "$pinned"; else free_port; fi
}

make_pki() {
  local pki="$state_dir/pki"
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=capstan-test-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
    sign() { # <name> <subject> <extensions>
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -out "$1.crt" \
        -extfile <(printf '%b' "$3")
      rm -f "$1.csr"
    }
    sign apiserver "/CN=kube-apiserver" \
      "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n"
    sign admin "/O=system:masters/CN=admin" \
      "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
    chmod 600 ./*.key
  ) >"$state_dir/logs/pki.log" 2>&1 || die "step pki: openssl failed; read $state_dir/logs/pki.log"
}

write_kubeconfig() { # <apiserver port>
  local pki="$state_dir/pki" b64='base64 -w0'
  cat >"$state_dir/kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: capstan
  cluster:
    server: https://127.0.0.1:$1
    certificate-authority-data: $($b64 <"$pki/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $($b64 <"$pki/admin.crt")
    client-key-data: $($b64 <"$pki/admin.key")
contexts:
- name: capstan
  context:
    cluster: capstan
    user: admin
current-context: capstan
EOF
  chmod 600 "$state_dir/kubeconfig.tmp"
  mv "$state_dir/kubeconfig.tmp" "$state_dir/kubeconfig"
}

start_etcd() {
  local attempt client peer rc
  for attempt in 1 2 3; do
    client=$(port_for CAPSTAN_CP_ETCD_PORT)
    peer=$(port_for CAPSTAN_CP_ETCD_PEER_PORT)
    [[ "$client" != "$peer" ]] || continue
    rm -rf "$state_dir/etcd"
    launch etcd --name=capstan --data-dir="$state_dir/etcd" \
      --listen-client-urls="http://127.0.0.1:$client" --advertise-client-urls="http://127.0.0.1:$client" \
      --listen-peer-urls="http://127.0.0.1:$peer" --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
      --initial-cluster="capstan=http://127.0.0.1:$peer" --initial-cluster-state=new \
      --unsafe-no-fsync --log-level=warn
    rc=0
    wait_ready etcd healthy curl --silent --fail --max-time 2 --noproxy '*' "http://127.0.0.1:$client/health" || rc=$?
    if [[ $rc == 0 ]]; then echo "$client" >"$state_dir/etcd-port"; return 0; fi
    forget_last
    if [[ -n "${CAPSTAN_CP_ETCD_PORT:-}${CAPSTAN_CP_ETCD_PEER_PORT:-}" ]]; then
      die "step start-etcd: port $client or $peer (pinned by CAPSTAN_CP_ETCD_PORT/CAPSTAN_CP_ETCD_PEER_PORT) is already in use; read $state_dir/logs/etcd.log"
    fi
    say "etcd: port $client or $peer was taken meanwhile; retrying with other ports ($attempt/3)"
  done
  die "step start-etcd: no free ports after 3 attempts; read $state_dir/logs/etcd.log"
}

start_apiserver() { # <with controller-manager: 0|1>
  local with_cm=$1 attempt port rc pki="$state_dir/pki" admission=()
  [[ $with_cm == 1 ]] || admission=(--disable-admission-plugins=ServiceAccount)
  for attempt in 1 2 3; do
    port=$(port_for CAPSTAN_CP_APISERVER_PORT)
    echo "$port" >"$state_dir/apiserver-port"
    launch kube-apiserver \
      --etcd-servers="http://127.0.0.1:$(cat "$state_dir/etcd-port")" \
      --bind-address=127.0.0.1 --secure-port="$port" --advertise-address=127.0.0.1 \
      --endpoint-reconciler-type=none \
      --cert-dir="$state_dir/apiserver-certs" \
      --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
      --client-ca-file="$pki/ca.crt" \
      --authorization-mode=RBAC \
      --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true \
      --service-account-issuer="https://127.0.0.1:$port" \
      --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
      "${admission[@]}"
    rc=0
    wait_ready kube-apiserver ready curl_api /readyz || rc=$?
    if [[ $rc == 0 ]]; then return 0; fi
    forget_last
    if [[ -n "${CAPSTAN_CP_APISERVER_PORT:-}" ]]; then
      die "step start-kube-apiserver: port $port (pinned by CAPSTAN_CP_APISERVER_PORT) is already in use; read $state_dir/logs/kube-apiserver.log"
    fi
    say "kube-apiserver: port $port was taken meanwhile; retrying with another port ($attempt/3)"
  done
  die "step start-kube-apiserver: no free port after 3 attempts; read $state_dir/logs/kube-apiserver.log"
}

start_controller_manager() {
  local pki="$state_dir/pki"
  launch kube-controller-manager \
    --kubeconfig="$state_dir/kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=0 \
    --controllers='*' \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --use-service-account-credentials=false --leader-elect=false \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --flex-volume-plugin-dir="$state_dir/flexvolume"
  # Ready once its service-account controller has created `default` in kube-system.
  wait_ready kube-controller-manager "ready (no ServiceAccount default/default)" \
    curl_api /api/v1/namespaces/default/serviceaccounts/default
}

cmd_up() {
  local with_cm=0
  while (($#)); do
    case "$1" in
      --with-controller-manager) with_cm=1 ;;
      *) die "usage: cp.sh up [--with-controller-manager]" ;;
    esac
    shift
  done
  need curl "used to probe readiness"
  need openssl "used to make the throw-away PKI"
  lock_state

  if healthy; then
    if [[ $with_cm == 1 && ! -f "$state_dir/pids/kube-controller-manager" ]]; then
      die "step up: a control plane WITHOUT kube-controller-manager is already running in $state_dir; run 'cp.sh down' first"
    fi
    say "already running and healthy in $state_dir; reusing it"
    echo "$state_dir/kubeconfig"
    return 0
  fi
  if [[ -e "$state_dir" ]]; then
    # Something stale (crashed or half-stopped): stop what it recorded, start anew.
    say "found a stale or unhealthy control plane in $state_dir; stopping it first"
    cmd_down
  fi

  trap on_exit EXIT
  trap 'say "interrupted"; exit 130' INT
  trap 'say "terminated"; exit 143' TERM
  local t0=$SECONDS
  step='build'
  cmd_build >/dev/null

  step='state-dir'
  mkdir -p "$state_dir"/{logs,pids} || die "step state-dir: cannot create $state_dir"
  created_state=1

  step='pki'
  make_pki

  step='start-etcd'
  start_etcd
  say "etcd ready on 127.0.0.1:$(cat "$state_dir/etcd-port") ($((SECONDS - t0)) s)"

  step='start-kube-apiserver'
  start_apiserver "$with_cm"
  local port
  port=$(cat "$state_dir/apiserver-port")
  write_kubeconfig "$port"
  say "kube-apiserver ready on https://127.0.0.1:$port ($((SECONDS - t0)) s)"

  step='default-namespace'
  local deadline=$((SECONDS + timeout))
  until curl_api /api/v1/namespaces/default >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "step default-namespace: namespace 'default' did not appear within ${timeout} s; read $state_dir/logs/kube-apiserver.log"
    sleep 0.2
  done

  if [[ $with_cm == 1 ]]; then
    step='start-kube-controller-manager'
    start_controller_manager
    say "kube-controller-manager ready ($((SECONDS - t0)) s)"
  fi

  up_done=1
  trap - EXIT INT TERM
  say "up in $((SECONDS - t0)) s; logs in $state_dir/logs; stop with: $0 down"
  echo "$state_dir/kubeconfig"
}

# ---------------------------------------------------------------- down, status, …
cmd_down() {
  local name pid
  while read -r name pid; do
    if pid_is "$pid" "$name"; then
      say "stopping $name (pid $pid)"
      stop_pid "$pid" "$name"
    fi
  done < <(
    # Reverse start order: controller-manager, apiserver, then etcd.
    recorded | sort -r -k1,1
  )
  if [[ -e "$state_dir" ]]; then
    rm -rf "$state_dir"
    say "removed $state_dir"
  fi
}

# Kill kube-apiserver, wait, start it again on the same port with the same
# PKI and etcd (for tests of how clients survive an API server restart).
cmd_restart_apiserver() {
  local down_for=0
  while (($#)); do
    case "$1" in
      --down-for) down_for=${2:?--down-for needs seconds}; shift ;;
      *) die "usage: cp.sh restart-apiserver [--down-for SECONDS]" ;;
    esac
    shift
  done
  lock_state
  healthy || die "step restart-apiserver: no running control plane in $state_dir"
  local pid with_cm=0
  pid=$(cat "$state_dir/pids/kube-apiserver")
  [[ -f "$state_dir/pids/kube-controller-manager" ]] && with_cm=1
  say "killing kube-apiserver (pid $pid, SIGKILL: a crash, not a drain); down for ${down_for} s"
  if pid_is "$pid" kube-apiserver; then
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$state_dir/pids/kube-apiserver"
  sleep "$down_for"
  trap on_exit EXIT
  step='restart-kube-apiserver'
  CAPSTAN_CP_APISERVER_PORT=$(cat "$state_dir/apiserver-port") start_apiserver "$with_cm"
  up_done=1
  trap - EXIT
  say "kube-apiserver restarted on port $(cat "$state_dir/apiserver-port")"
}

cmd_status() {
  if healthy; then
    say "running and ready: $(recorded | cut -d' ' -f1 | tr '\n' ' ')($state_dir)"
    return 0
  fi
  say "not running (or not ready) in $state_dir"
  return 1
}

cmd_kubeconfig() {
  healthy || die "no running control plane in $state_dir (start one with: $0 up)"
  echo "$state_dir/kubeconfig"
}

cmd_env() {
  healthy || die "no running control plane in $state_dir (start one with: $0 up)"
  printf 'export KUBECONFIG=%q\n' "$state_dir/kubeconfig"
}

sub=${1:-}
[[ $# -gt 0 ]] && shift
case "$sub" in
  build) cmd_build "$@" ;;
  build-scheduler) cmd_build_scheduler "$@" ;;
  up) cmd_up "$@" ;;
  down) [[ $# -eq 0 ]] || die "usage: cp.sh down"; lock_state; cmd_down ;;
  status) [[ $# -eq 0 ]] || die "usage: cp.sh status"; cmd_status ;;
  kubeconfig) [[ $# -eq 0 ]] || die "usage: cp.sh kubeconfig"; cmd_kubeconfig ;;
  env) [[ $# -eq 0 ]] || die "usage: cp.sh env"; cmd_env ;;
  restart-apiserver) cmd_restart_apiserver "$@" ;;
  *) die "usage: cp.sh build | build-scheduler | up [--with-controller-manager] | down | status | kubeconfig | env | restart-apiserver [--down-for S]" ;;
esac
