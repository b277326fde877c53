#!/usr/bin/env bash
# Fetches the upstream Helm charts of our add-ons that ship inside Go modules, for the add-on image
# test (tests/it/addon_images.rs), into a cache outside the repository:
#
#   ${MAGNUM_CAPI_CACHE:-~/.cache/magnum-capi}/addon-charts-<hash>/
#     <chart name>/   the chart directory as its module ships it, named as Chart.yaml names it
#                     (the name a HelmChartProxy's chartName gives)
#     BUILD           one line per chart: name, chart version, module@version, directory in it
#
# The hash covers this script (the pins below) and the stand-in library chart beside it, so a
# change of pin fetches a new directory; a complete one (it has BUILD) is reused as it is.
# Nothing is downloaded but Go modules, through the machine's Go module proxy, into a throwaway
# module cache (the modules are large; only their charts are kept). Each module's zip is checked
# against the h1: sum pinned here, which also covers the one module the checksum database does
# not answer for. The last line on stdout is the directory.
#
#   tests/addon-charts/fetch.sh            fetch what is missing, print the directory
#   tests/addon-charts/fetch.sh --check    only check that every pin resolves (nothing kept)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

log() { printf '[addon-charts] %s\n' "$*" >&2; }

# chart name | module | version | h1 sum of the module zip | chart directory in the module
# The versions closest to the [capi] *_chart_version defaults that the proxy serves:
#   tigera-operator: the proxy serves no release of Calico's module (its v3 tags have no /v3
#     suffix), only this master snapshot (chart v0.0, operator v1.34 of the Calico 3.31 cycle);
#   metrics-server 3.13.1 (pin 3.13.0; module v0.9.0), ingress-nginx 4.11.0 (pin 4.13.0: the
#     only snapshot served), gpu-operator v1.0.0-devel (a September 2025 snapshot, pin v25.3.4);
#   the others are the pinned versions.
pins=(
  "tigera-operator|github.com/projectcalico/calico|v1.11.0-cni-plugin.0.20250813170300-a0db560f0520|h1:TXnPEzx4pLWgwzCetIO/VJuz4iBZZrOdNSv16a50YqE=|charts/tigera-operator"
  "cilium|github.com/cilium/cilium|v1.19.3|h1:foJrHPk45HwshOd8Qf/kptf9JxPfNySkIDKsetZa9+Y=|install/kubernetes/cilium"
  "flannel|github.com/flannel-io/flannel|v0.27.4|h1:/i1Bj6/wtBoHSJApQYhve7zK4kycDdFa8yyFDZnUiNE=|chart/kube-flannel"
  "openstack-cloud-controller-manager|k8s.io/cloud-provider-openstack|v1.33.1|h1:RtFnb1Ila4YZEFsohM0ovyFVQV1Ct9fdnPgCVlQfZdY=|charts/openstack-cloud-controller-manager"
  "openstack-cinder-csi|k8s.io/cloud-provider-openstack|v1.33.1|h1:RtFnb1Ila4YZEFsohM0ovyFVQV1Ct9fdnPgCVlQfZdY=|charts/cinder-csi-plugin"
  "openstack-manila-csi|k8s.io/cloud-provider-openstack|v1.33.1|h1:RtFnb1Ila4YZEFsohM0ovyFVQV1Ct9fdnPgCVlQfZdY=|charts/manila-csi-plugin"
  "metrics-server|sigs.k8s.io/metrics-server|v0.9.0|h1:nlqqZ2H0Xfko8eJC/1qaNVVT17hu4rxndkOi22KTZ4w=|charts/metrics-server"
  "ingress-nginx|k8s.io/ingress-nginx|v0.0.0-20240708192948-52c50467d67d|h1:tZui5g6S4GO1hxLm6yrEoIXLkl4QfeGytlmZqZ+DmdQ=|charts/ingress-nginx"
  "gpu-operator|github.com/NVIDIA/gpu-operator|v0.0.0-20250917190837-d73a0086a6ba|h1:LoeqwWjR0h2WRyHXmyYCPVwM/dAdKKxjE8LzyyeuqHI=|deployments/gpu-operator"
)
# The checksum database has no record of cloud-provider-openstack's releases: the pinned sum
# above is the check.
export GONOSUMDB=k8s.io/cloud-provider-openstack
export GOFLAGS=-modcacherw

if ! command -v go >/dev/null 2>&1; then
  log "Go is needed to fetch the add-on charts (they ship in Go modules): install Go 1.26"
  exit 1
fi

hash=$(
  {
    cat fetch.sh
    find common -type f | LC_ALL=C sort | xargs cat
  } | sha256sum | cut -c1-16
)
cache=${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}
out="$cache/addon-charts-$hash"

if [ "${1:-}" != "--check" ] && [ -f "$out/BUILD" ]; then
  echo "$out"
  exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.addon-charts.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export GOMODCACHE="$tmp/gomod"
: >"$tmp/BUILD"

# json_field NAME: the string field NAME of `go mod download -json`'s answer on stdin.
json_field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p"; }

# fetch MODULE VERSION SUM: sets `dir` to the module's directory in the throwaway cache, its
# zip checked (once per module version).
declare -A fetched=()
fetch() {
  local mod=$1 version=$2 sum=$3 answer got
  if [ -z "${fetched[$mod@$version]:-}" ]; then
    log "fetching $mod@$version"
    # Outside any go.mod, so that only the pin decides.
    answer=$(cd "$tmp" && go mod download -json "$mod@$version") || {
      log "$mod@$version does not resolve through the Go module proxy"
      return 1
    }
    got=$(json_field Sum <<<"$answer")
    if [ "$got" != "$sum" ]; then
      log "$mod@$version: its zip's sum is $got, pinned $sum"
      return 1
    fi
    fetched[$mod@$version]=$(json_field Dir <<<"$answer")
  fi
  dir=${fetched[$mod@$version]}
}

start=$(date +%s)
for pin in "${pins[@]}"; do
  IFS='|' read -r chart mod version sum sub <<<"$pin"
  fetch "$mod" "$version" "$sum"
  [ -f "$dir/$sub/Chart.yaml" ] || { log "$mod@$version has no chart in $sub"; exit 1; }
  name=$(sed -n 's/^name:[[:space:]]*//p' "$dir/$sub/Chart.yaml" | head -n 1)
  if [ "$name" != "$chart" ]; then
    log "$mod@$version/$sub holds the chart $name, not $chart"
    exit 1
  fi
  [ "${1:-}" = "--check" ] && continue
  cp -r "$dir/$sub" "$tmp/$chart"
  chmod -R u+w "$tmp/$chart"
  chart_version=$(sed -n 's/^version:[[:space:]]*//p' "$dir/$sub/Chart.yaml" | head -n 1)
  printf '%-36s %-14s %s %s\n' "$chart" "$chart_version" "$mod@$version" "$sub" >>"$tmp/BUILD"
done
if [ "${1:-}" = "--check" ]; then
  log "every pin resolves"
  exit 0
fi
# The CCM chart's labels come from Bitnami's `common` library chart, which no module ships.
mkdir -p "$tmp/openstack-cloud-controller-manager/charts"
cp -r common "$tmp/openstack-cloud-controller-manager/charts/common"
rm -rf "$GOMODCACHE"
log "fetched in $(($(date +%s) - start)) s"
cat "$tmp/BUILD" >&2

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
# Fetches of earlier pins: keep only this one, and those of the last hour (a test run may still
# be reading one).
find "$cache" -maxdepth 1 -name 'addon-charts-*' ! -path "$out" -mmin +60 -exec rm -rf {} +
echo "$out"
