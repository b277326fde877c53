# shellcheck shell=bash
# devstack/plugin.sh: devstack entry point of magnum-capi (`enable_plugin magnum-capi <repo>`).
# stack.sh, unstack.sh and clean.sh source this file with the phase as arguments; the work is
# done by the functions in lib/magnum-capi (defaults in settings, sourced by devstack before).

# shellcheck source=devstack/lib/magnum-capi
source "$(dirname "${BASH_SOURCE[0]}")/lib/magnum-capi"

if is_service_enabled magnum-capi magnum-capi-mgmt; then
    case "$1 ${2:-}" in
        "stack pre-install")
            # Fail before anything is built when the database cannot be PostgreSQL.
            magnum_capi_check_database_type
            ;;
        "stack install")
            if is_service_enabled magnum-capi; then
                echo_summary "Installing magnum-capi"
                install_magnum_capi
            fi
            if is_service_enabled magnum-capi-mgmt; then
                echo_summary "Creating the k3s Cluster API management cluster"
                magnum_capi_install_mgmt_cluster
            fi
            ;;
        "stack post-config")
            if is_service_enabled magnum-capi; then
                echo_summary "Configuring magnum-capi"
                configure_magnum_capi
            fi
            ;;
        "stack extra")
            if is_service_enabled magnum-capi; then
                echo_summary "Starting magnum-capi"
                start_magnum_capi
                echo_summary "Uploading the CAPI image and creating the public cluster template"
                magnum_capi_create_template
            fi
            ;;
        "stack test-config")
            if is_service_enabled magnum-capi; then
                magnum_capi_smoke_check
            fi
            ;;
        "unstack "*)
            stop_magnum_capi
            magnum_capi_stop_mgmt_cluster
            ;;
        "clean "*)
            cleanup_magnum_capi
            ;;
    esac
fi
