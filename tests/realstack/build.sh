#!/usr/bin/env bash
# Builds the real management stack of the real-stack test tier from its pinned Go modules, into a
# cache outside the repository:
#
#   ${MAGNUM_CAPI_CACHE:-~/.cache/magnum-capi}/realstack-<hash of the pins>/
#     bin/        etcd, kube-apiserver, kube-controller-manager, capi-manager,
#                 kubeadm-bootstrap-manager, kubeadm-control-plane-manager, capo-manager,
#                 caaph-manager, node-agent (written here: plays every server, see agent/main.go),
#                 stackctl (written here: starts them all, see stackctl/main.go)
#     manifests/  each provider's config/ (CRDs, kustomizations, webhook configurations) and ORC's
#                 Image CRD, as its module ships them
#     BUILD       what was built, from which module version, how long it took and its size
#
# The hash covers this script and every go.mod/go.sum/Go source (tests aside) of tests/realstack, so
# a change of pin builds a new directory; a complete directory is reused as it is. Nothing is
# downloaded but Go modules, through the machine's Go module proxy. The last line on stdout is the
# directory.
#
#   tests/realstack/build.sh            build what is missing, print the directory
#   tests/realstack/build.sh --check    only check that every pinned module resolves
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0

log() { printf '[realstack] %s\n' "$*" >&2; }

modules=(etcd k8s capi capo caaph agent stackctl)
hash=$(
  {
    cat build.sh
    for m in "${modules[@]}"; do
      find "$m" -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) ! -name '*_test.go' | LC_ALL=C sort | xargs cat
    done
    go version
  } | sha256sum | cut -c1-16
)
cache=${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}
out="$cache/realstack-$hash"

# Every pinned module must resolve through the proxy before anything is built.
check_modules() {
  for m in "${modules[@]}"; do
    (cd "$m" && go mod download) || {
      log "the modules pinned in tests/realstack/$m/go.mod do not all resolve"
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
tmp=$(mktemp -d "$cache/.realstack-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/manifests"
: >"$tmp/BUILD"

# build MODULE_DIR OUTPUT_NAME PACKAGE [LDFLAGS]
build() {
  local dir=$1 name=$2 pkg=$3 ldflags=${4:-} start end version
  start=$(date +%s)
  log "building $name from $pkg"
  (cd "$dir" && go build -trimpath -ldflags="-s -w $ldflags" -o "$tmp/bin/$name" "$pkg")
  end=$(date +%s)
  version=$(cd "$dir" && go list -f '{{with .Module}}{{.Path}}@{{or .Version "(here)"}}{{end}}' "$pkg")
  printf '%-32s %-72s %4ss %4s MiB\n' "$name" "$version" "$((end - start))" \
    "$(($(stat -c %s "$tmp/bin/$name") / 1048576))" | tee -a "$tmp/BUILD" >&2
}

# copy_config MODULE_DIR MODULE_PATH SUBDIR DEST: a module's config/ folder, as it ships it.
copy_config() {
  local dir=$1 mod=$2 sub=$3 dest=$4 src
  src=$(cd "$dir" && go list -m -f '{{.Dir}}' "$mod")
  mkdir -p "$tmp/manifests/$dest"
  cp -r "$src/$sub/." "$tmp/manifests/$dest/"
  chmod -R u+w "$tmp/manifests/$dest"
}

total_start=$(date +%s)
build etcd etcd go.etcd.io/etcd/server/v3
# Kubernetes' release builds stamp their version (hack/lib/version.sh); without it the apiserver
# says v0.0.0-master and CAPI refuses to start ("minimum required version is v1.20.0").
k8s_version=$(cd k8s && go list -m -f '{{.Version}}' k8s.io/kubernetes)
k8s_minor=$(echo "$k8s_version" | cut -d. -f2)
k8s_ldflags=""
for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $v.gitVersion=$k8s_version -X $v.gitMajor=1 -X $v.gitMinor=$k8s_minor"
  k8s_ldflags+=" -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
done
build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_ldflags"
build capi capi-manager sigs.k8s.io/cluster-api/core
build capi kubeadm-bootstrap-manager sigs.k8s.io/cluster-api/bootstrap/kubeadm
build capi kubeadm-control-plane-manager sigs.k8s.io/cluster-api/controlplane/kubeadm
build capo capo-manager sigs.k8s.io/cluster-api-provider-openstack
build caaph caaph-manager sigs.k8s.io/cluster-api-addon-provider-helm
build agent node-agent .
build stackctl stackctl .

copy_config capi sigs.k8s.io/cluster-api core/config capi-core
copy_config capi sigs.k8s.io/cluster-api bootstrap/kubeadm/config capi-bootstrap
copy_config capi sigs.k8s.io/cluster-api controlplane/kubeadm/config capi-controlplane
copy_config capo sigs.k8s.io/cluster-api-provider-openstack config capo
copy_config caaph sigs.k8s.io/cluster-api-addon-provider-helm config caaph
orc=$(cd capo && go list -m -f '{{.Dir}}' github.com/k-orc/openstack-resource-controller/v2)
mkdir -p "$tmp/manifests/orc"
cp "$orc/config/crd/bases/openstack.k-orc.cloud_images.yaml" "$tmp/manifests/orc/"
chmod -R u+w "$tmp/manifests/orc"

log "built in $(($(date +%s) - total_start)) s"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
# Builds of earlier pins are ~600 MiB each: keep only this one, and those built in the last hour
# (a stack another test run or up.sh started from one may still be running its binaries).
find "$cache" -maxdepth 1 -name 'realstack-*' ! -path "$out" -mmin +60 -exec rm -rf {} +
echo "$out"
