#!/usr/bin/env bash
# Captures what the project's control plane serves (discovery of every
# group/version/kind and the OpenAPI v3 schemas of every built-in kind) into
# host/src/cluster/mock/api.json.gz, which the mock cluster embeds.
#
#   tests/control-plane/capture-api.sh [output]
#
# Starts its own control plane in CAPSTAN_CP_DIR (default /tmp/cp-capture, so
# it never meets another one), captures, and stops it again. Run it after
# changing KUBERNETES_VERSION in versions.env, and commit the result.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
out=${1:-$repo/host/src/cluster/mock/api.json.gz}
export CAPSTAN_CP_DIR=${CAPSTAN_CP_DIR:-/tmp/cp-capture}

command -v python3 >/dev/null || { echo "capture-api: python3 is required" >&2; exit 1; }
trap '"$here/cp.sh" down' EXIT
"$here/cp.sh" up >/dev/null
python3 "$here/capture-api.py" "$CAPSTAN_CP_DIR" "$KUBERNETES_VERSION" "$out"
