#!/usr/bin/env bash
# Builds (or reuses) a Python virtualenv with the OpenStack dashboard and its Container Infra
# panels from PyPI, and Selenium to drive Debian's Chromium through Debian's chromedriver
# (tests/it/client_horizon_browser.rs calls this script; the browser itself comes from apt, never
# from Selenium Manager).
#
#   .ci/horizon-venv.sh              ensure the venv exists; print its directory
#   .ci/horizon-venv.sh --print-dir  only print the directory it would use (no install)
#
# python-magnumclient is pinned below 5.0.0: 5.0.0 removed the `input_auth_token` argument
# magnum-ui 19 passes, and every Container Infra page fails with it. Cached like the Keystone
# venv (.ci/venv-lib.sh):
#   ${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}/horizon-<first 12 hex of sha256(REQUIREMENTS)>
set -euo pipefail

REQUIREMENTS='horizon==27.0.0
magnum-ui==19.0.0
python-magnumclient==4.11.0
selenium==4.38.0'

# shellcheck source=.ci/venv-lib.sh
. "$(dirname "$0")/venv-lib.sh"
cached_venv horizon "$REQUIREMENTS" 'openstack_dashboard, magnum_ui, magnumclient, selenium' \
  django-admin -- "$@"
