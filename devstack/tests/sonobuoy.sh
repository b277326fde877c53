#!/usr/bin/env bash
# devstack/tests/sonobuoy.sh: Kubernetes conformance of a cluster created through magnum-capi.
#
# Run on a devstack host with the magnum-capi plugin, as a user with OpenStack credentials in
# the environment (e.g. `source devstack/openrc demo demo`):
#
#   devstack/tests/sonobuoy.sh
#
# It creates a cluster from the plugin's public template, waits for CREATE_COMPLETE, fetches its
# kubeconfig with `openstack coe cluster config`, runs Sonobuoy (pinned in devstack/settings,
# downloaded through the plugin's cache), fails when a Sonobuoy plugin did not pass, copies the
# results to the log directory, and always deletes the cluster on exit, waiting until it is gone.
#
# Environment (all optional):
#   SONOBUOY_MODE                      certified-conformance (default) or quick
#   SONOBUOY_WAIT_MINS                 how long `sonobuoy run --wait` waits (default 180)
#   SONOBUOY_TIMEOUT_SECS              Sonobuoy's own plugin timeout (default 10800)
#   MAGNUM_CAPI_TEST_CLUSTER_NAME      cluster name (default sonobuoy-<epoch>)
#   MAGNUM_CAPI_TEST_TEMPLATE          template (default MAGNUM_CAPI_TEMPLATE_NAME from settings)
#   MAGNUM_CAPI_TEST_MASTER_COUNT      control-plane nodes (default 1)
#   MAGNUM_CAPI_TEST_NODE_COUNT        worker nodes (default 1)
#   MAGNUM_CAPI_TEST_KEYPAIR           Nova keypair for the nodes (default none)
#   MAGNUM_CAPI_TEST_CREATE_TIMEOUT    minutes until the create counts as failed (default 60)
#   MAGNUM_CAPI_TEST_DELETE_TIMEOUT    minutes to wait for the delete (default 30)
#   MAGNUM_CAPI_TEST_POLL_SECS         status poll interval (default 30)
#   MAGNUM_CAPI_TEST_LOG_DIR           where results go (default ./sonobuoy-results)
#   MAGNUM_CAPI_TEST_KEEP_CLUSTER      True: do not delete the cluster (debugging only)
set -euo pipefail

# `openstack coe cluster config` prints shell exports and looks at $SHELL to choose their syntax.
export SHELL=${SHELL:-/bin/bash}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=devstack/settings
source "$here/../settings"
# shellcheck source=devstack/lib/magnum-capi
source "$here/../lib/magnum-capi"

mode=${SONOBUOY_MODE:-certified-conformance}
wait_mins=${SONOBUOY_WAIT_MINS:-180}
sonobuoy_timeout=${SONOBUOY_TIMEOUT_SECS:-10800}
cluster=${MAGNUM_CAPI_TEST_CLUSTER_NAME:-sonobuoy-$(date +%s)}
template=${MAGNUM_CAPI_TEST_TEMPLATE:-$MAGNUM_CAPI_TEMPLATE_NAME}
master_count=${MAGNUM_CAPI_TEST_MASTER_COUNT:-1}
node_count=${MAGNUM_CAPI_TEST_NODE_COUNT:-1}
keypair=${MAGNUM_CAPI_TEST_KEYPAIR:-}
create_timeout=${MAGNUM_CAPI_TEST_CREATE_TIMEOUT:-60}
delete_timeout=${MAGNUM_CAPI_TEST_DELETE_TIMEOUT:-30}
poll=${MAGNUM_CAPI_TEST_POLL_SECS:-30}
log_dir=${MAGNUM_CAPI_TEST_LOG_DIR:-$PWD/sonobuoy-results}
keep=${MAGNUM_CAPI_TEST_KEEP_CLUSTER:-False}

case "$mode" in
    certified-conformance | quick | non-disruptive-conformance) ;;
    *)
        echo "SONOBUOY_MODE must be certified-conformance, non-disruptive-conformance or quick" >&2
        exit 2
        ;;
esac

log() { printf '%s sonobuoy.sh: %s\n' "$(date -u +%FT%TZ)" "$*" >&2; }

work=$(mktemp -d)
mkdir -p "$log_dir"
created=false

cluster_field() {
    openstack coe cluster show "$cluster" -f value -c "$1"
}

# Deletes the cluster (if this run created it) and waits until it is gone; keeps the exit status
# of the run unless the delete itself fails.
cleanup() {
    local rc=$? deadline status
    set +e
    if [[ $created == true ]] && ! _magnum_capi_true "$keep"; then
        log "deleting cluster $cluster"
        openstack coe cluster show "$cluster" -f yaml >"$log_dir/cluster-before-delete.yaml" 2>&1
        openstack coe cluster delete "$cluster"
        deadline=$((SECONDS + delete_timeout * 60))
        while openstack coe cluster show "$cluster" >/dev/null 2>&1; do
            status=$(cluster_field status 2>/dev/null)
            if [[ $status == DELETE_FAILED ]]; then
                log "DELETE_FAILED: $(cluster_field status_reason 2>/dev/null)"
                [[ $rc -ne 0 ]] || rc=1
                break
            fi
            if ((SECONDS > deadline)); then
                log "cluster $cluster still exists after ${delete_timeout} min (status $status)"
                [[ $rc -ne 0 ]] || rc=1
                break
            fi
            sleep "$poll"
        done
        log "cluster $cluster is gone"
    fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT

create_args=(coe cluster create "$cluster" --cluster-template "$template"
    --master-count "$master_count" --node-count "$node_count" --timeout "$create_timeout")
if [[ -n $keypair ]]; then
    create_args+=(--keypair "$keypair")
fi
log "creating cluster $cluster from template $template ($master_count + $node_count nodes)"
openstack "${create_args[@]}"
created=true

# The service turns a create into CREATE_FAILED after its create_timeout; the extra 10 minutes
# only guard against a status that never moves.
deadline=$((SECONDS + (create_timeout + 10) * 60))
while true; do
    status=$(cluster_field status)
    case "$status" in
        CREATE_COMPLETE)
            log "cluster $cluster is CREATE_COMPLETE"
            break
            ;;
        *_FAILED)
            log "cluster $cluster is $status: $(cluster_field status_reason)"
            openstack coe cluster show "$cluster" -f yaml >"$log_dir/cluster-failed.yaml" || true
            exit 1
            ;;
    esac
    if ((SECONDS > deadline)); then
        log "timed out waiting for CREATE_COMPLETE (status $status)"
        openstack coe cluster show "$cluster" -f yaml >"$log_dir/cluster-timeout.yaml" || true
        exit 1
    fi
    sleep "$poll"
done
openstack coe cluster show "$cluster" -f yaml >"$log_dir/cluster.yaml"

mkdir -p "$work/kube"
openstack coe cluster config "$cluster" --dir "$work/kube" --force >/dev/null
export KUBECONFIG=$work/kube/config

sonobuoy=$(magnum_capi_install_sonobuoy "$work/bin")
"$sonobuoy" version --kubeconfig "$KUBECONFIG"

log "sonobuoy run --mode $mode (waiting up to $wait_mins min)"
"$sonobuoy" run --kubeconfig "$KUBECONFIG" --mode "$mode" --timeout "$sonobuoy_timeout" \
    --wait="$wait_mins"
"$sonobuoy" status --kubeconfig "$KUBECONFIG" | tee "$log_dir/status.txt"

tarball=$("$sonobuoy" retrieve --kubeconfig "$KUBECONFIG" "$log_dir")
log "results: $tarball"
"$sonobuoy" results "$tarball" | tee "$log_dir/results.txt"
mkdir -p "$log_dir/extracted"
tar -xzf "$tarball" -C "$log_dir/extracted"

# `sonobuoy results` prints one "Status: <passed|failed|...>" per plugin.
statuses=$(awk '/^Status:/ {print $2}' "$log_dir/results.txt")
if [[ -z $statuses ]]; then
    log "no plugin status in the results"
    exit 1
fi
if grep -qv '^passed$' <<<"$statuses"; then
    log "a Sonobuoy plugin did not pass; failures:"
    "$sonobuoy" results "$tarball" --mode detailed --plugin e2e \
        | grep -F '"status":"failed"' >"$log_dir/failed-tests.jsonl" || true
    cat "$log_dir/failed-tests.jsonl" >&2 || true
    exit 1
fi
log "all Sonobuoy plugins passed ($mode)"
