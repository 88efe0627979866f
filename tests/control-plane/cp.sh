#!/usr/bin/env bash
# Capstan's local Kubernetes control plane for scripts and tests: a thin
# wrapper over `capstan cluster` (docs/cluster.md), kept for its callers.
#
#   cp.sh build                        build the binaries once (cached by version)
#   cp.sh build-scheduler              build kube-scheduler once too (for the scheduler
#                                      benchmark); prints its path
#   cp.sh up [--with-controller-manager]
#                                      start on free loopback ports, wait until ready,
#                                      write a kubeconfig; prints its path last
#   cp.sh down                         stop exactly what `up` started, remove its state
#   cp.sh status                       exit 0 if a started control plane answers /readyz
#   cp.sh restart-apiserver [--down-for S]
#                                      kill kube-apiserver, wait S seconds, start it again (same port)
#   cp.sh kubeconfig                   print the kubeconfig path of the running one
#   cp.sh env                          print `export KUBECONFIG=...` for eval
#
# Environment:
#   CAPSTAN_BIN          the capstan binary to use (default: built from this checkout
#                        with cargo into $CARGO_TARGET_DIR, default <repo>/target)
#   CAPSTAN_CACHE        cache root for binaries    (default: ~/.cache/capstan)
#   CAPSTAN_CP_DIR       state dir of the control plane (default: that of the cluster
#                        named `capstan`, ~/.local/state/capstan/clusters/capstan)
#   CAPSTAN_CP_TIMEOUT   seconds each component may take to become ready (default: 120)
#   CAPSTAN_CP_ETCD_PORT, CAPSTAN_CP_ETCD_PEER_PORT, CAPSTAN_CP_APISERVER_PORT
#                        pin a port instead of picking a free one (no retry if taken)
#
# Unlike `capstan cluster`, `up` starts without kube-controller-manager unless
# asked, and `down` removes the state (`capstan cluster down --purge`).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

die() { printf 'control-plane: error: %s\n' "$*" >&2; exit 1; }

capstan=${CAPSTAN_BIN:-}
if [[ -z "$capstan" ]]; then
  target=${CARGO_TARGET_DIR:-$repo/target}
  (cd "$repo" && CARGO_TARGET_DIR=$target cargo build --quiet -p capstan-host --bin capstan) >&2 ||
    die "building the capstan binary failed (cargo build -p capstan-host --bin capstan)"
  capstan="$target/debug/capstan"
fi
cluster() { "$capstan" cluster "$@"; }

sub=${1:-}
[[ $# -gt 0 ]] && shift
case "$sub" in
  build) [[ $# -eq 0 ]] || die "usage: cp.sh build"; cluster build ;;
  build-scheduler)
    [[ $# -eq 0 ]] || die "usage: cp.sh build-scheduler"
    dir=$(cluster build --with-scheduler)
    echo "$dir/kube-scheduler"
    ;;
  up)
    cm=(--no-controller-manager)
    while (($#)); do
      case "$1" in
        --with-controller-manager) cm=() ;;
        *) die "usage: cp.sh up [--with-controller-manager]" ;;
      esac
      shift
    done
    cluster up "${cm[@]}"
    ;;
  down) [[ $# -eq 0 ]] || die "usage: cp.sh down"; cluster down --purge ;;
  status) [[ $# -eq 0 ]] || die "usage: cp.sh status"; cluster status --name capstan >&2 ;;
  kubeconfig) [[ $# -eq 0 ]] || die "usage: cp.sh kubeconfig"; cluster kubeconfig ;;
  env) [[ $# -eq 0 ]] || die "usage: cp.sh env"; cluster env ;;
  restart-apiserver) cluster restart-apiserver "$@" ;;
  *) die "usage: cp.sh build | build-scheduler | up [--with-controller-manager] | down | status | kubeconfig | env | restart-apiserver [--down-for S]" ;;
esac
