#!/usr/bin/env bash
# Builds every guest component the tests and examples use, for wasm32-wasip2,
# and collects them in one folder: $CAPSTAN_GUESTS (default
# $CARGO_TARGET_DIR/guests). Prints that folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
out=${CAPSTAN_GUESTS:-$target/guests}
mkdir -p "$out"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "build-guests: installing the wasm32-wasip2 target" >&2
  rustup target add wasm32-wasip2 >&2
fi

# Building one package with several feature sets rebuilds it each time
# (a cdylib's file carries no hash of its features), about 90 s on two cores
# even when nothing changed. So the whole set is cached in
# $CAPSTAN_CACHE/rust-guests/ under a hash of everything it is built from
# (paths relative to the checkout: every clone on the machine shares it).
cache=${CAPSTAN_CACHE:-$HOME/.cache/capstan}/rust-guests
inputs=(Cargo.toml Cargo.lock wit guest-sdk/Cargo.toml guest-sdk/src examples/greeter examples/greeter-webhooks
  examples/tenant examples/silences examples/fleet examples/zone-scheduler tests/fixtures/guests
  tests/fixtures/other-world tests/fixtures/future-contract tests/fixtures/contract-0.1.0
  tests/fixtures/contract-0.3.0 tests/fixtures/noop tests/fixtures/strict-webhooks)
key=$(
  cd "$root"
  {
    rustc -vV
    echo "RUSTFLAGS=${RUSTFLAGS:-} CARGO_ENCODED_RUSTFLAGS=${CARGO_ENCODED_RUSTFLAGS:-} SILENCES_ALERTMANAGER=${SILENCES_ALERTMANAGER:-}"
    sha256sum <tests/build-guests.sh
    find "${inputs[@]}" -type f -not -path '*/target/*' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
)
if [[ -f $cache/$key/.complete ]]; then
  cp "$cache/$key"/*.wasm "$out/"
  echo "build-guests: cached ($cache/$key)" >&2
  echo "$out"
  exit 0
fi
final=$out
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

build() { # <package> [cargo args...]
  cargo build --quiet --release --target wasm32-wasip2 -p "$@" >&2
}
release="$target/wasm32-wasip2/release"

build greeter --features v2
cp "$release/greeter.wasm" "$out/greeter-v2.wasm"
build greeter --features v3
cp "$release/greeter.wasm" "$out/greeter-v3.wasm"
build greeter --features broken
cp "$release/greeter.wasm" "$out/greeter-broken.wasm"
build greeter
cp "$release/greeter.wasm" "$out/greeter.wasm"
build tenant
cp "$release/tenant.wasm" "$out/tenant.wasm"
build silences
cp "$release/silences.wasm" "$out/silences.wasm"
build fleet
cp "$release/fleet.wasm" "$out/fleet.wasm"
# The same example calling the Alertmanager that the e2e tests start on
# loopback, on the port fixed for them (capstan_tests::alertmanager::E2E_PORT).
SILENCES_ALERTMANAGER=http://127.0.0.1:19093 build silences
cp "$release/silences.wasm" "$out/silences-e2e.wasm"
build zone-scheduler
cp "$release/zone_scheduler.wasm" "$out/zone-scheduler.wasm"
build greeter-webhooks --features v2
cp "$release/greeter_webhooks.wasm" "$out/greeter-webhooks-v2.wasm"
build greeter-webhooks
cp "$release/greeter_webhooks.wasm" "$out/greeter-webhooks.wasm"
# A greeter built against contract 0.1.0, kept as a binary (see its README).
gunzip -c "$root/tests/fixtures/contract-0.1.0/greeter.wasm.gz" > "$out/greeter-0.1.0.wasm"
# Built from source against the frozen 0.3.0 WIT (see its lib.rs).
build fixture-contract-0-3
cp "$release/fixture_contract_0_3.wasm" "$out/contract-0.3.0.wasm"
build fixture-other-world
cp "$release/fixture_other_world.wasm" "$out/other-world.wasm"
build fixture-future-contract
cp "$release/fixture_future_contract.wasm" "$out/future-contract.wasm"
build fixture-noop
cp "$release/fixture_noop.wasm" "$out/noop.wasm"
build fixture-strict-webhooks --features audit,broken
cp "$release/fixture_strict_webhooks.wasm" "$out/strict-webhooks-audit-broken.wasm"
build fixture-strict-webhooks --features audit
cp "$release/fixture_strict_webhooks.wasm" "$out/strict-webhooks-audit.wasm"
build fixture-strict-webhooks
cp "$release/fixture_strict_webhooks.wasm" "$out/strict-webhooks.wasm"
build capstan-fixture-guests --features loud
cp "$release/capstan_fixture_guests.wasm" "$out/loud.wasm"
build capstan-fixture-guests --features crd-thief
cp "$release/capstan_fixture_guests.wasm" "$out/crd-thief.wasm"
build capstan-fixture-guests --features wildcard
cp "$release/capstan_fixture_guests.wasm" "$out/wildcard.wasm"
build capstan-fixture-guests --features scheduler-twin
cp "$release/capstan_fixture_guests.wasm" "$out/scheduler-twin.wasm"
build capstan-fixture-guests --features status-writer
cp "$release/capstan_fixture_guests.wasm" "$out/status-writer.wasm"
build capstan-fixture-guests --features keeper
cp "$release/capstan_fixture_guests.wasm" "$out/keeper.wasm"
build capstan-fixture-guests --features snooper
cp "$release/capstan_fixture_guests.wasm" "$out/snooper.wasm"
build capstan-fixture-guests --features meddler
cp "$release/capstan_fixture_guests.wasm" "$out/meddler.wasm"
build capstan-fixture-guests --features copycat
cp "$release/capstan_fixture_guests.wasm" "$out/copycat.wasm"
build capstan-fixture-guests --features conversion-copycat
cp "$release/capstan_fixture_guests.wasm" "$out/conversion-copycat.wasm"
build capstan-fixture-guests --features secret-mutator
cp "$release/capstan_fixture_guests.wasm" "$out/secret-mutator.wasm"
build capstan-fixture-guests --features unwritable
cp "$release/capstan_fixture_guests.wasm" "$out/unwritable.wasm"
build capstan-fixture-guests --features spreader
cp "$release/capstan_fixture_guests.wasm" "$out/spreader.wasm"
build capstan-fixture-guests --features fetcher
cp "$release/capstan_fixture_guests.wasm" "$out/fetcher.wasm"
build capstan-fixture-guests --features invalid-manifest
cp "$release/capstan_fixture_guests.wasm" "$out/invalid-manifest.wasm"
build capstan-fixture-guests
cp "$release/capstan_fixture_guests.wasm" "$out/fixture.wasm"

cp "$out"/*.wasm "$final/"
mkdir -p "$cache"
rm -rf "$cache/$key.tmp$$"
cp -r "$out" "$cache/$key.tmp$$"
touch "$cache/$key.tmp$$/.complete"
# Older sets are of no more use; another run may have stored this one meanwhile.
find "$cache" -mindepth 1 -maxdepth 1 -not -name "$key" -not -name "*.tmp*" -exec rm -rf {} +
mv -T "$cache/$key.tmp$$" "$cache/$key" 2>/dev/null || rm -rf "$cache/$key.tmp$$"
echo "$final"
