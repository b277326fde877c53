#!/usr/bin/env bash
# Builds the previous release of magnum-capi from this repository's history, for the rollback test
# (tests/it/previous_release.rs), into a cache outside the repository:
#
#   ${MAGNUM_CAPI_CACHE:-~/.cache/magnum-capi}/release-<version>-<commit>/
#     magnum-capi   the release's binary, built as the tests build ours (debug, default features)
#     BUILD         the tag, the commit, the toolchain and how long the build took
#
# The release is named in .ci/previous-release ("<tag> <commit>"). Its tag is used when the clone
# has it (and must point at that commit); a clone without tags falls back to the commit, which any
# full clone of main holds. A complete directory is reused as it is. The last line on stdout is
# the directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

log() { printf '[previous-release] %s\n' "$*" >&2; }

read -r tag commit <.ci/previous-release
if resolved=$(git rev-parse -q --verify "refs/tags/$tag^{commit}" 2>/dev/null); then
  if [ "$resolved" != "$commit" ]; then
    log "tag $tag is $resolved, but .ci/previous-release says $commit"
    exit 1
  fi
elif ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
  log "neither tag $tag nor commit $commit is in this clone (a shallow clone?): fetch the tags or the full history"
  exit 1
fi

cache=${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}
out="$cache/release-${tag#v}-${commit:0:12}"
if [ -f "$out/BUILD" ] && [ -x "$out/magnum-capi" ]; then
  echo "$out"
  exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.release-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
git archive --format=tar "$commit" | tar -x -C "$tmp" -f -
mkdir -p "$tmp/out"
start=$(date +%s)
log "building $tag ($commit) with $(rustc --version)"
# Its own target directory: the release's crates must not replace the build under test.
(cd "$tmp" && CARGO_TARGET_DIR="$tmp/target" cargo build --locked --quiet --bin magnum-capi)
cp "$tmp/target/debug/magnum-capi" "$tmp/out/magnum-capi"
printf '%s %s built in %s s with %s\n' "$tag" "$commit" "$(($(date +%s) - start))" \
  "$(rustc --version)" | tee "$tmp/out/BUILD" >&2
rm -rf "$out"
mv "$tmp/out" "$out"
echo "$out"
