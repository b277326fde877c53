#!/usr/bin/env bash
# Builds the real Go clients of the client tests (tests/it/client_gophercloud.rs,
# tests/it/client_terraform.rs) from their pinned Go modules, into a cache outside the repository:
#
#   ${MAGNUM_CAPI_CACHE:-~/.cache/magnum-capi}/clients-<hash>/
#     bin/gophercloud-check   our program (gophercloud/main.go) on gophercloud v2, as pinned
#     terraform-mirror/       the Terraform OpenStack provider, as pinned, laid out as a Terraform
#                             filesystem mirror (registry.terraform.io/terraform-provider-openstack/
#                             openstack/<version>/<os>_<arch>/terraform-provider-openstack_v<version>)
#     BUILD                   what was built, from which module version, how long it took, its size
#
# The hash covers this script, every go.mod/go.sum/Go source of tests/clients and the Go version; a
# complete directory is reused as it is. Nothing is downloaded but Go modules, through the machine's
# Go module proxy. Terraform itself is not built: the tests use the machine's (see README). The
# last line on stdout is the directory.
#
#   tests/clients/build.sh            build what is missing, print the directory
#   tests/clients/build.sh --check    only check that every pinned module resolves
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0

log() { printf '[clients] %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "Go is needed to build the client tests' programs (tests/clients): install Go 1.26"
  exit 1
fi

modules=(gophercloud terraform)
hash=$(
  {
    cat build.sh
    for m in "${modules[@]}"; do
      find "$m" -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort | xargs cat
    done
    go version
  } | sha256sum | cut -c1-16
)
cache=${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}
out="$cache/clients-$hash"

check_modules() {
  for m in "${modules[@]}"; do
    (cd "$m" && go mod download) || {
      log "the modules pinned in tests/clients/$m/go.mod do not all resolve"
      return 1
    }
  done
  log "every pinned module resolves"
}

if [ "${1:-}" = "--check" ]; then
  check_modules
  exit 0
fi

if [ -f "$out/BUILD" ]; then
  echo "$out"
  exit 0
fi

check_modules
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.clients-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/BUILD"

# build MODULE_DIR OUTPUT PACKAGE
build() {
  local dir=$1 dest=$2 pkg=$3 start end version
  start=$(date +%s)
  log "building $(basename "$dest") from $pkg"
  mkdir -p "$(dirname "$dest")"
  (cd "$dir" && go build -trimpath -ldflags="-s -w" -o "$dest" "$pkg")
  end=$(date +%s)
  version=$(cd "$dir" && go list -f '{{with .Module}}{{.Path}}@{{or .Version "(here)"}}{{end}}' "$pkg")
  printf '%-32s %-80s %4ss %4s MiB\n' "$(basename "$dest")" "$version" "$((end - start))" \
    "$(($(stat -c %s "$dest") / 1048576))" | tee -a "$tmp/BUILD" >&2
}

total_start=$(date +%s)
gophercloud=$(cd gophercloud && go list -m -f '{{.Version}}' github.com/gophercloud/gophercloud/v2)
build gophercloud "$tmp/bin/gophercloud-check" .
echo "gophercloud-check uses github.com/gophercloud/gophercloud/v2@$gophercloud" >>"$tmp/BUILD"

provider=github.com/terraform-provider-openstack/terraform-provider-openstack/v3
version=$(cd terraform && go list -m -f '{{.Version}}' "$provider")
platform="$(go env GOOS)_$(go env GOARCH)"
# The provider's own main package (a `tool` of terraform/go.mod), under the address its main.go
# serves: registry.terraform.io/terraform-provider-openstack/openstack.
build terraform "$tmp/terraform-mirror/registry.terraform.io/terraform-provider-openstack/openstack/${version#v}/$platform/terraform-provider-openstack_$version" "$provider"
echo "the provider uses github.com/gophercloud/gophercloud/v2@$(cd terraform && go list -m -f '{{.Version}}' github.com/gophercloud/gophercloud/v2)" >>"$tmp/BUILD"

log "built in $(($(date +%s) - total_start)) s"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
# Earlier builds (about 30 MiB each): keep only this one.
for old in "$cache"/clients-*; do
  [ "$old" = "$out" ] || rm -rf "$old"
done
echo "$out"
