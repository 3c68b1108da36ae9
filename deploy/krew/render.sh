#!/usr/bin/env bash
# Packs the static `conclave` binary (deploy/build-static.sh) into the krew archive and prints
# deploy/krew/conclave.yaml with the release's version, the archive's uri and its real sha256,
# for `kubectl krew install --manifest=... --archive=...` or a release's assets.
#
# Usage: deploy/krew/render.sh VERSION URI ARCHIVE
#   VERSION  the release, semver with a leading v (v0.1.0)
#   URI      where ARCHIVE will be downloaded from (the release asset's URL)
#   ARCHIVE  the tar.gz to write: kubectl-conclave (the binary renamed) at its root
# Environment:
#   CONCLAVE_STATIC_BINARY  the binary to pack (default: target/static/conclave)
#
# The archive is reproducible (sorted, owner 0, mtime 0, gzip without a name or time), so the same
# binary gives the same sha256. The manifest has one platform, linux/amd64: the values of its
# single `version:`, `uri:` and `sha256:` lines are replaced.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [[ $# -ne 3 ]]; then
    echo "usage: $0 VERSION URI ARCHIVE" >&2
    exit 2
fi
version=$1 uri=$2 archive=$3
if [[ ! $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$ ]]; then
    echo "render.sh: VERSION must be semver with a leading v (v0.1.0), not $version" >&2
    exit 2
fi
if [[ ! $uri =~ ^https?:// ]]; then
    echo "render.sh: URI must be an http(s) URL, not $uri" >&2
    exit 2
fi
binary=${CONCLAVE_STATIC_BINARY:-$repo/target/static/conclave}
if [[ ! -x $binary ]]; then
    echo "render.sh: no executable $binary: run deploy/build-static.sh or set CONCLAVE_STATIC_BINARY" >&2
    exit 1
fi

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
install -m 0755 "$binary" "$staging/kubectl-conclave"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$staging" -cf - kubectl-conclave \
    | gzip -n -9 > "$archive"
sha256=$(sha256sum "$archive" | cut -d' ' -f1)

# The URI goes into a sed replacement: escape its backslashes, `&` and the `#` delimiter.
uri_escaped=$(printf '%s' "$uri" | sed -e 's/[\\&#]/\\&/g')
sed -E \
    -e "s#^(  version: ).*#\1$version#" \
    -e "s#^(      uri: ).*#\1$uri_escaped#" \
    -e "s#^(      sha256: ).*#\1\"$sha256\"#" \
    "$here/conclave.yaml"
