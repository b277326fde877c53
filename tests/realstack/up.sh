#!/usr/bin/env bash
# Starts the whole real stack on loopback for a person to try by hand, and prints the `export`
# lines of a tenant and of the management cluster's admin:
#
#   - the real management cluster (etcd, kube-apiserver, kube-controller-manager) with the real
#     CAPI, CABPK, KCP, CAPO and CAAPH managers and their webhooks (tests/realstack/build.sh
#     builds them from their pinned Go modules, once, into ~/.cache/magnum-capi);
#   - the real Keystone, with the fake Nova/Glance/Neutron/Octavia/Cinder registered in its
#     catalog;
#   - `magnum-capi serve` in production mode (no --dev: Keystone tokens, the CAPI driver, the
#     real management cluster) on 127.0.0.1:$PORT (default 9511), registered as `container-infra`.
#
# Everything is started by the test harness (`cargo test --test it -- --ignored realstack::up`),
# so what a person tries is what the tests run. tests/realstack/down.sh stops it all.
#
#   eval "$(tests/realstack/up.sh)"
#   openstack coe cluster template list; kubectl get clusters -A
set -euo pipefail
cd "$(dirname "$0")/../.."
state=${REALSTACK_STATE:-/tmp/magnum-capi-realstack}
port=${PORT:-9511}

if [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then
  echo "# already running (tests/realstack/down.sh stops it)" >&2
  cat "$state/env"
  exit 0
fi
rm -rf "$state"
mkdir -p "$state"

echo "# building the real stack and the test harness (the first time takes a while)" >&2
bash tests/realstack/build.sh >/dev/null
cargo test --test it --no-run >&2 2>"$state/cargo.log" || {
  cat "$state/cargo.log" >&2
  exit 1
}

REALSTACK_STATE=$state PORT=$port setsid cargo test --test it -- --ignored --exact \
  realstack::up --nocapture >"$state/up.log" 2>&1 </dev/null &
echo $! >"$state/pid"

for _ in $(seq 1 600); do
  if [ -f "$state/env" ]; then
    cat "$state/env"
    exit 0
  fi
  if ! kill -0 "$(cat "$state/pid")" 2>/dev/null; then
    echo "# the stack did not come up; the end of $state/up.log:" >&2
    tail -n 60 "$state/up.log" >&2
    exit 1
  fi
  sleep 1
done
echo "# not up within 10 minutes; see $state/up.log" >&2
exit 1
