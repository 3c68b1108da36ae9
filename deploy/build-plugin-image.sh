#!/usr/bin/env bash
# Packs strategy plugins into an OCI image, FROM scratch, for the chart's image volume
# (`plugins.source=image`): the image's files are the plugin directory the controller loads.
#
# Usage: deploy/build-plugin-image.sh --tag IMAGE NAME.wasm...
#   Each NAME.wasm goes to the image's root with its sidecar NAME.json: the one next to it if
#   there is one (it must pin the component's sha256, so the controller verifies the file it
#   loads), else a new sidecar holding only that pin. The image has nothing else: no shell, no
#   base. Push it (or `tests/kube/cluster.sh load` it) and pin it by digest in the chart.
# Environment: CONCLAVE_ENGINE and CONCLAVE_PODMAN_FLAGS as for deploy/build-image.sh.
set -euo pipefail

say() { echo "build-plugin-image.sh: $*" >&2; }
die() { say "$*"; exit 1; }

tag=
plugins=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) tag=${2:?--tag IMAGE}; shift 2 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (usage: --tag IMAGE NAME.wasm...)" ;;
    *) plugins+=("$1"); shift ;;
  esac
done
[[ -n $tag ]] || die "--tag IMAGE is required"
[[ ${#plugins[@]} -gt 0 ]] || die "no plugin given (usage: --tag IMAGE NAME.wasm...)"

engine=${CONCLAVE_ENGINE:-}
if [[ -z $engine ]]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then engine=docker
  elif command -v podman >/dev/null; then engine=podman
  else die "neither a docker daemon nor podman (Debian: apt-get install podman runc)"
  fi
fi
case "$engine" in
  podman) read -r -a flags <<<"${CONCLAVE_PODMAN_FLAGS:-}"; cli=(podman "${flags[@]}") ;;
  docker) cli=(docker) ;;
  *) die "CONCLAVE_ENGINE is docker or podman, not $engine" ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/root"
for wasm in "${plugins[@]}"; do
  [[ $wasm == *.wasm && -f $wasm ]] || die "$wasm is not a .wasm file"
  name=$(basename "$wasm" .wasm)
  [[ -e $work/root/$name.wasm ]] && die "two plugins named $name.wasm"
  sha256=$(sha256sum "$wasm" | cut -d' ' -f1)
  cp "$wasm" "$work/root/$name.wasm"
  sidecar=${wasm%.wasm}.json
  if [[ -f $sidecar ]]; then
    grep -q "\"sha256\"[[:space:]]*:[[:space:]]*\"$sha256\"" "$sidecar" \
      || die "$sidecar does not pin $name.wasm's sha256 ($sha256): add \"sha256\": \"$sha256\""
    cp "$sidecar" "$work/root/$name.json"
  else
    printf '{"sha256": "%s"}\n' "$sha256" >"$work/root/$name.json"
  fi
  say "$name.wasm sha256:$sha256"
done
printf 'FROM scratch\nCOPY . /\n' >"$work/Containerfile"
"${cli[@]}" build --quiet -f "$work/Containerfile" -t "$tag" "$work/root" >/dev/null
say "$tag built with $engine: ${#plugins[@]} plugin(s)"
