#!/usr/bin/env bash
# Builds the guest components written in Python and JavaScript, and
# collects them beside the Rust ones in $CAPSTAN_GUESTS (default
# $CARGO_TARGET_DIR/guests). Prints that folder on stdout; progress and
# timings go to stderr.
#
#   greeter-python.wasm             examples/greeter-python (componentize-py)
#   greeter-js.wasm                 examples/greeter-js (jco, QuickJS engine)
#   greeter-js-spidermonkey.wasm    examples/greeter-js (componentize-js, SpiderMonkey)
#   silences-python.wasm            examples/silences-python (componentize-py)
#   fleet-python.wasm               examples/fleet-python (componentize-py)
#   greeter-webhooks-python.wasm    examples/greeter-webhooks-python (componentize-py)
#   greeter-webhooks-js.wasm        examples/greeter-webhooks-js (jco, QuickJS engine)
#   tenant-js.wasm                  examples/tenant-js (jco, QuickJS engine)
#   zone-scheduler-python.wasm      examples/zone-scheduler-python (componentize-py)
#   zone-scheduler-js.wasm          examples/zone-scheduler-js (jco, QuickJS engine)
#   template-python.wasm            host/templates/python, rendered
#   template-js.wasm                host/templates/js, rendered
#   templates/<lang>/               the rendered templates (their scenarios)
#   toolchains.env                  python_bin= and node_bin=: where componentize-py and jco are
#
# Toolchains are installed once, pinned, outside the clone, in
# ${CAPSTAN_CACHE:-$HOME/.cache/capstan}/toolchains/: a Python venv with
# componentize-py from PyPI, and an npm prefix with jco, componentize-js and
# esbuild. Every component is cached in $CAPSTAN_CACHE/polyglot/ under a
# hash of its sources, the WIT, the SDK, this script and the toolchain
# versions: a second run with nothing changed only copies files.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${CAPSTAN_CACHE:-$HOME/.cache/capstan}
target=${CARGO_TARGET_DIR:-$root/target}
out=${CAPSTAN_GUESTS:-$target/guests}

# Pinned toolchains. preview2-shim is what componentize-js 0.23 runs its
# splicer on without declaring it; 0.26 opens no directories by default and
# breaks it ("reading file .../wit: No such file or directory").
COMPONENTIZE_PY=0.25.1
JCO=1.35.0
COMPONENTIZE_JS=0.23.0
PREVIEW2_SHIM=0.25.0
ESBUILD=0.28.2

toolchains=$cache/toolchains
built=$cache/polyglot
mkdir -p "$out" "$toolchains" "$built"
started=$(date +%s.%N)
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2fs", b - a }'; }
say() { echo "build-polyglot: $*" >&2; }

# One installer at a time: concurrent runs share the toolchains.
exec 9>"$toolchains/.lock"
flock 9

python=${PYTHON:-python3}
py_version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
py_env=$toolchains/componentize-py-$COMPONENTIZE_PY-python$py_version
if [[ ! -f $py_env/.installed ]]; then
  t=$(date +%s.%N)
  rm -rf "$py_env"
  "$python" -m venv "$py_env"
  "$py_env/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY" >&2
  touch "$py_env/.installed"
  say "installed componentize-py $COMPONENTIZE_PY in $py_env ($(since "$t"))"
fi

node_manifest=$(printf '{"private":true,"dependencies":{"@bytecodealliance/jco":"%s","@bytecodealliance/componentize-js":"%s","@bytecodealliance/preview2-shim":"%s","esbuild":"%s"}}\n' \
  "$JCO" "$COMPONENTIZE_JS" "$PREVIEW2_SHIM" "$ESBUILD")
node_env=$toolchains/node-jco-$JCO-componentize-js-$COMPONENTIZE_JS-esbuild-$ESBUILD
if [[ ! -f $node_env/.installed ]]; then
  t=$(date +%s.%N)
  rm -rf "$node_env"
  mkdir -p "$node_env"
  echo "$node_manifest" >"$node_env/package.json"
  (cd "$node_env" && npm install --no-audit --no-fund --loglevel=error >&2)
  touch "$node_env/.installed"
  say "installed jco $JCO, componentize-js $COMPONENTIZE_JS, esbuild $ESBUILD in $node_env ($(since "$t"))"
fi
flock -u 9

componentize_py=$py_env/bin/componentize-py
bin=$node_env/node_modules/.bin
toolchain_key="componentize-py=$COMPONENTIZE_PY python=$py_version jco=$JCO componentize-js=$COMPONENTIZE_JS preview2-shim=$PREVIEW2_SHIM esbuild=$ESBUILD node=$(node --version)"

# A hash of every file under the given paths (caches and build output
# excluded), of this script and of the toolchain versions. Paths are hashed
# relative to the checkout, so that every clone on the machine (CI clones
# afresh each time) finds the components another one built.
key() {
  {
    echo "$toolchain_key"
    sha256sum <"$0"
    cd "$root" && find "${@#"$root"/}" -type f -not -path '*/__pycache__/*' -not -path '*/node_modules/*' -print0 \
      | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
}

# build <output name> <key> <command...>: runs the command with $OUT set to
# a temporary file unless the cache has the output for this key; copies the
# result to $out.
build() {
  local name=$1 hash=$2
  shift 2
  local cached=$built/$name-$hash.wasm t
  t=$(date +%s.%N)
  if [[ -f $cached ]]; then
    cp "$cached" "$out/$name.wasm"
    say "$name: cached ($(since "$t"), $(stat -c %s "$cached") bytes)"
    return
  fi
  local tmp
  tmp=$(mktemp -d)
  OUT=$tmp/$name.wasm TMP=$tmp "$@" >&2
  mv "$tmp/$name.wasm" "$cached.tmp$$" && mv "$cached.tmp$$" "$cached"
  rm -rf "$tmp"
  # Older builds of the same component are of no more use.
  find "$built" -name "$name-*.wasm" -not -name "$name-$hash.wasm" -delete
  cp "$cached" "$out/$name.wasm"
  say "$name: built ($(since "$t"), $(stat -c %s "$cached") bytes)"
}

# componentize-py runs the app module at build time (and snapshots it), so
# a module may read files beside it while building (the greeter's CRD).
python_component() { # <app dir> <module>
  "$componentize_py" -d "$wit" -w operator componentize -p "$1" -p "$root/guest-sdk/python" "$2" -o "$OUT"
}

# One ES module with the SDK and JSON files inlined; only the WIT imports
# (capstan:*, and wasi:* for the SDK's http) stay imports.
js_bundle() { # <entry>
  "$bin/esbuild" "$1" --bundle --format=esm --platform=neutral --target=es2020 \
    --alias:capstan-guest="$root/guest-sdk/js/src/index.js" --external:'capstan:*' --external:'wasi:*' \
    --log-level=warning --outfile="$TMP/bundle.js"
}

# QuickJS (through jco): small and quick to compile. The sync mode keeps
# component-model-async out, which the host does not enable.
#
# componentize-qjs 0.4.5 (jco 1.35's QuickJS backend) cannot build a world
# that imports wasi:http: its build-time snapshot fills unknown imports with
# traps and gives `wasi:http/types` an `input-stream` of its own ("component
# imports instance `wasi:http/types@0.2.12`, but a matching implementation
# was not found in the linker: instance export `input-stream` has the wrong
# type: mismatched resource types"). So QuickJS components are built against
# the operator world less that import: still capstan:operator@0.4.0, without
# HTTP (an app that uses capstan-guest's `http` fails to build there).
qjs_wit=$(mktemp -d)/wit
trap 'rm -rf "${qjs_wit%/wit}"' EXIT
mkdir "$qjs_wit"
for f in "$root"/wit/*.wit; do
  sed '/^[[:space:]]*import wasi:http\//d' "$f" >"$qjs_wit/${f##*/}"
done
js_quickjs() { # <entry>
  js_bundle "$1"
  # jco reads the WIT through a WASI sandbox rooted at the working directory.
  (cd "$qjs_wit/.." && "$bin/jco" componentize "$TMP/bundle.js" --wit "${qjs_wit##*/}" --world-name operator \
    --backend quickjs --backend-qjs-disable-async -o "$OUT")
}

# SpiderMonkey (componentize-js). The engine's own fetch and HTTP server are
# disabled; capstan-guest's `http` calls the world's wasi:http import itself.
js_spidermonkey() { # <entry>
  js_bundle "$1"
  (cd "$root" && "$bin/componentize-js" "$TMP/bundle.js" --wit "$wit" --world-name operator \
    --disable http fetch-event -o "$OUT")
}

sdk_py=$root/guest-sdk/python/capstan_guest
sdk_js=$root/guest-sdk/js/src
wit=$root/wit

build greeter-python "$(key "$root/examples/greeter-python" "$sdk_py" "$wit")" \
  python_component "$root/examples/greeter-python" greeter
js_key=$(key "$root/examples/greeter-js" "$sdk_js" "$wit")
build greeter-js "$js_key" js_quickjs "$root/examples/greeter-js/greeter.js"
build greeter-js-spidermonkey "$js_key" js_spidermonkey "$root/examples/greeter-js/greeter.js"
build tenant-js "$(key "$root/examples/tenant-js" "$sdk_js" "$wit")" js_quickjs "$root/examples/tenant-js/tenant.js"
build silences-python "$(key "$root/examples/silences-python" "$sdk_py" "$wit")" \
  python_component "$root/examples/silences-python" silences
build fleet-python "$(key "$root/examples/fleet-python" "$sdk_py" "$wit")" \
  python_component "$root/examples/fleet-python" fleet
build greeter-webhooks-python "$(key "$root/examples/greeter-webhooks-python" "$sdk_py" "$wit")" \
  python_component "$root/examples/greeter-webhooks-python" webhooks
build greeter-webhooks-js "$(key "$root/examples/greeter-webhooks-js" "$sdk_js" "$wit")" \
  js_quickjs "$root/examples/greeter-webhooks-js/webhooks.js"
build zone-scheduler-python "$(key "$root/examples/zone-scheduler-python" "$sdk_py" "$wit")" \
  python_component "$root/examples/zone-scheduler-python" zone_scheduler
build zone-scheduler-js "$(key "$root/examples/zone-scheduler-js" "$sdk_js" "$wit")" \
  js_quickjs "$root/examples/zone-scheduler-js/zone-scheduler.js"

# The templates of `capstan new --lang python|js`, rendered with sample
# values, so that they are built and their scenarios run like the examples.
render() { # <lang>
  local from=$root/host/templates/$1 to=$out/templates/$1 file rel
  rm -rf "$to"
  while IFS= read -r -d '' file; do
    rel=${file#"$from"/}
    rel=${rel%.tmpl}
    [[ $rel == gitignore ]] && rel=.gitignore
    mkdir -p "$(dirname "$to/$rel")"
    sed -e 's|{{name}}|hello-controller|g' -e 's|{{kind}}|Hello|g' -e 's|{{plural}}|hellos|g' \
      -e 's|{{group}}|example.com|g' -e "s|{{sdk_dir}}|$root/guest-sdk/$1|g" -e "s|{{wit_dir}}|$wit|g" \
      "$file" >"$to/$rel"
  done < <(find "$from" -type f -print0)
  echo "$to"
}
if [[ -d $root/host/templates/python ]]; then
  tpl=$(render python)
  build template-python "$(key "$root/host/templates/python" "$sdk_py" "$wit")" \
    env PATH="$py_env/bin:$PATH" bash -c "cd '$tpl' && bash build.sh \"\$OUT\""
fi
if [[ -d $root/host/templates/js ]]; then
  tpl=$(render js)
  build template-js "$(key "$root/host/templates/js" "$sdk_js" "$wit")" \
    env PATH="$bin:$PATH" bash -c "cd '$tpl' && bash build.sh \"\$OUT\""
fi

# Where the toolchains are, for tests that build projects of their own
# (`capstan new --lang python|js` outside a checkout).
printf 'python_bin=%s\nnode_bin=%s\n' "$py_env/bin" "$bin" >"$out/toolchains.env"

say "done in $(since "$started")"
echo "$out"
