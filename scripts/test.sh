#!/usr/bin/env bash
# The test command. On a fresh machine it installs what the tests need (the
# wasm32-wasip2 target, rustfmt, clippy), builds the guest components and the
# control plane (cached outside the clone, keyed by version), starts the
# control plane unless one is running, and runs fmt, clippy and every test.
#
#   scripts/test.sh          everything (CI runs this)
#   scripts/test.sh --fast   the contributor's loop: fmt, the guests, the
#                            Python and JavaScript SDK tests, and every test
#                            that needs no cluster (unit, mock host,
#                            scenarios, polyglot); no clippy, no control
#                            plane, no e2e
set -euo pipefail
cd "$(dirname "$0")/.."

fast=
case "${1:-}" in
  --fast) fast=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--fast]" >&2; exit 2 ;;
esac

export CAPSTAN_CACHE=${CAPSTAN_CACHE:-$HOME/.cache/capstan}
# One target directory for every clone on this machine: builds are slow on
# two cores, and CI runs in a fresh clone each time.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CAPSTAN_CACHE/target}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
started=$SECONDS
step() { printf '\n== %s (%ss)\n' "$*" "$((SECONDS - started))" >&2; }

# Every fresh clone builds the workspace's crates under new hashes (their
# path is part of them), so the shared target directory keeps growing, by
# about 2 GB a run, and by more in incremental state that a fresh clone
# never reuses (28 GB of it filled this machine's disk once). CI (a fresh
# clone each time) compiles without incremental state, and artifacts of
# this workspace's crates not touched for two hours belong to clones gone.
if [[ -n ${CI:-} ]]; then
  export CARGO_INCREMENTAL=0
fi
if [[ -d $CARGO_TARGET_DIR/debug/deps ]]; then
  # Test binaries are the only executables there (proc macros are .so).
  find "$CARGO_TARGET_DIR/debug/deps" -maxdepth 1 -type f -mmin +120 \( \( -executable ! -name '*.so' \) \
    -o -name 'libcapstan_*' -o -name 'libgreeter*' -o -name 'libtenant-*' -o -name 'libzone_scheduler-*' \) -delete
  find "$CARGO_TARGET_DIR/debug/incremental" -mindepth 1 -maxdepth 1 -mmin +120 -exec rm -rf {} + 2>/dev/null || true
fi

step "toolchain"
installed=$(rustup target list --installed)
grep -qx wasm32-wasip2 <<<"$installed" || rustup target add wasm32-wasip2
components=$(rustup component list --installed)
grep -q '^rustfmt' <<<"$components" || rustup component add rustfmt
grep -q '^clippy' <<<"$components" || rustup component add clippy

guests=(-p capstan-guest -p greeter -p tenant -p silences -p fleet -p zone-scheduler -p greeter-webhooks -p capstan-fixture-guests -p fixture-noop -p fixture-other-world -p fixture-future-contract -p fixture-strict-webhooks -p fixture-contract-0-3)

step "format"
cargo fmt --all --check

if [[ -z $fast ]]; then
  step "lint: host and tests"
  cargo clippy --all-targets -- -D warnings
  cargo clippy -p greeter -p tenant -p silences -p fleet -p zone-scheduler --tests -- -D warnings

  step "lint: guests (wasm32-wasip2)"
  cargo clippy --target wasm32-wasip2 "${guests[@]}" -- -D warnings
fi

step "build: guest components"
CAPSTAN_GUESTS=$(tests/build-guests.sh)
export CAPSTAN_GUESTS

step "build: Python and JavaScript guest components (toolchains pinned, cached)"
tests/build-polyglot-guests.sh >/dev/null

step "test: Python and JavaScript guest libraries"
python3 -m pytest -q guest-sdk/python/tests
(cd guest-sdk/js && npm test --silent)

# Runs the tests of the packages given: builds every test binary once, runs
# the doc tests, then the test binaries several at a time
# (scripts/run-suites.py; CAPSTAN_TEST_JOBS, default 2), every suite even
# after a failing one, and prints one closing line over all of them.
run_tests() {
  local artifacts doc status=0
  artifacts=$(mktemp) doc=$(mktemp)
  cargo test --no-run --message-format=json-render-diagnostics "$@" >"$artifacts"
  step "test: doc tests"
  cargo test --doc "$@" 2>&1 | tee "$doc" || status=$?
  step "test: suites, ${CAPSTAN_TEST_JOBS:-2} at a time"
  scripts/run-suites.py --count-also "$doc" "$artifacts" || status=$?
  step "done"
  rm -f "$artifacts" "$doc"
  exit "$status"
}
examples=(-p greeter -p tenant -p silences -p fleet -p zone-scheduler -p capstan-guest)

if [[ -n $fast ]]; then
  step "test: unit, mock host, scenarios (no cluster)"
  run_tests -p capstan-host "${examples[@]}"
fi

step "control plane: build (cached) and start (capstan cluster)"
cargo build --quiet -p capstan-host --bin capstan
capstan="$CARGO_TARGET_DIR/debug/capstan"
"$capstan" cluster build >/dev/null
if "$capstan" cluster status --name capstan >/dev/null 2>&1; then
  echo "reusing the running cluster 'capstan'" >&2
else
  # State left by an earlier run that was killed (its etcd, maybe large) is
  # removed: the tests start from an empty cluster, as on a fresh machine.
  "$capstan" cluster down --purge >/dev/null 2>&1 || true
  trap '"$capstan" cluster down --purge >&2 || true' EXIT
  "$capstan" cluster up >/dev/null
fi
KUBECONFIG=$("$capstan" cluster kubeconfig)
export KUBECONFIG CAPSTAN_E2E_KUBECONFIG=$KUBECONFIG

step "test"
run_tests -p capstan-host -p capstan-tests "${examples[@]}"
