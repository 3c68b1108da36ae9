#!/usr/bin/env bash
# Builds one Python and one JavaScript strategy plugin from the `conclave strategy new --lang`
# templates (host/cli/templates/{python,javascript}) with the pinned registry toolchains, for
# host/cli/tests/languages.rs:
#   componentize-py 0.25.1 (PyPI) in a venv at target/langs/py,
#   @bytecodealliance/componentize-js 0.23.0 and the @bytecodealliance/jco 1.35.0 it runs (npm) in
#   target/langs/js.
# The projects are created into target/langs/build/{python/py-rule,javascript/js-rule} with
# `conclave strategy new --lang` (target/debug/conclave, or $CONCLAVE_BIN: build it first), built
# there, and copied with their sidecars into target/langs/plugins, the directory the end-to-end
# test gives `conclave run --plugins`. Skips a build whose inputs have not changed. Needs python3
# (with venv) and node/npm on PATH. Prints the elapsed time.
set -euo pipefail
start=$(date +%s)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
langs=$repo/target/langs
templates=$repo/host/cli/templates
conclave=${CONCLAVE_BIN:-$repo/target/debug/conclave}
if [[ ! -x $conclave ]]; then
    echo "prepare-langs: $conclave is missing; build it first (cargo build -p conclave)" >&2
    exit 1
fi
componentize_py=0.25.1
componentize_js=0.23.0
jco=1.35.0
mkdir -p "$langs/build" "$langs/plugins"

say() { echo "prepare-langs: $*"; }

# The toolchains.
if ! "$langs/py/bin/componentize-py" --version 2>/dev/null | grep -qx "componentize-py $componentize_py"; then
    say "installing componentize-py==$componentize_py into $langs/py"
    python3 -m venv "$langs/py"
    "$langs/py/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$componentize_py"
fi
installed() { sed -n 's/^  "version": "\(.*\)",$/\1/p' "$langs/js/node_modules/@bytecodealliance/$1/package.json" 2>/dev/null; }
if [[ $(installed componentize-js) != "$componentize_js" || $(installed jco) != "$jco" ]]; then
    say "installing @bytecodealliance/componentize-js@$componentize_js and @bytecodealliance/jco@$jco into $langs/js"
    rm -rf "$langs/js"
    mkdir -p "$langs/js"
    # jco is pinned too: componentize-js depends on it (^1.15.1) and would take the newest.
    (cd "$langs/js" && npm init -y >/dev/null &&
        npm install --no-audit --no-fund --save-exact "@bytecodealliance/componentize-js@$componentize_js" "@bytecodealliance/jco@$jco" >/dev/null)
fi
export PATH=$langs/py/bin:$langs/js/node_modules/.bin:$PATH

# Creates project NAME in LANG for strategy STRATEGY in DIR, as a strategy author does.
instantiate() {
    local lang=$1 name=$2 strategy=$3 dir=$4
    rm -rf "$dir"
    mkdir -p "$(dirname "$dir")"
    "$conclave" strategy new "$name" --strategy "$strategy" --lang "$lang" --dir "$dir" >/dev/null
}

# Builds LANG's template as NAME unless its inputs are unchanged since the last build.
build() {
    local lang=$1 name=$2 strategy=$3 lib=${2//-/_}
    local dir=$langs/build/$lang/$name
    local stamp
    stamp=$(cat "$templates/$lang"/* "$templates"/*.json "$repo/wit/strategy.wit" <(echo "$componentize_py $componentize_js $jco $strategy") | sha256sum | cut -c1-16)
    if [[ -f $langs/plugins/$lib.wasm && -f $dir/.stamp && $(cat "$dir/.stamp") == "$stamp" ]]; then
        say "$lang plugin $lib.wasm is up to date"
        return
    fi
    instantiate "$lang" "$name" "$strategy" "$dir"
    local built=$(date +%s)
    if [[ $lang == python ]]; then
        # The README's build commands: the bindings (for editors and type checkers), then the
        # component, WASI-free (--stub-wasi).
        (cd "$dir" && componentize-py -d wit -w strategy bindings . &&
            componentize-py -d wit -w strategy componentize --stub-wasi app -o "$lib.wasm" >/dev/null)
    else
        (cd "$dir" && ln -sfn "$langs/js/node_modules" node_modules && npm run --silent build >/dev/null)
    fi
    say "built $lang plugin $lib.wasm ($(stat -c %s "$dir/$lib.wasm") bytes) in $(( $(date +%s) - built ))s"
    cp "$dir/$lib.wasm" "$dir/$lib.json" "$langs/plugins/"
    echo "$stamp" >"$dir/.stamp"
}

build python py-rule example.com/py-rule
build javascript js-rule example.com/js-rule
say "plugins in $langs/plugins: $(cd "$langs/plugins" && echo *.wasm)"
say "elapsed $(( $(date +%s) - start ))s"
