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
# The build also compresses the dashboard's scripts and styles with the test's own settings
# (tests/it/horizon/local), whose digest is a comment line of REQUIREMENTS: changing them
# rebuilds. Fresh: about 90 s on the 2-core machine (pip ~60 s, compression ~25 s; up to 4 min
# when the machine is busy).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
settings="$root/tests/it/horizon"

REQUIREMENTS="horizon==27.0.0
magnum-ui==19.0.0
python-magnumclient==4.11.0
selenium==4.38.0
# settings $(cat "$settings"/local/*.py | sha256sum | cut -c1-12)"

# Horizon loads a plugin's panels only from its own `openstack_dashboard/local/enabled/`: copy
# magnum-ui's five files there. Then compress every page's scripts and styles offline (into the
# venv's `static/`), with the settings the test runs Horizon with: a page loads three scripts
# instead of 600 and renders in milliseconds instead of the ~10 s online compression takes.
venv_after_install() {
  local site
  site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cp "$site"/magnum_ui/enabled/_[0-9]*.py "$site/openstack_dashboard/local/enabled/"
  PYTHONPATH="$settings" PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore \
    DJANGO_SETTINGS_MODULE=openstack_dashboard.settings \
    "$1/bin/django-admin" compress --force
}

# shellcheck source=.ci/venv-lib.sh
. "$root/.ci/venv-lib.sh"
cached_venv horizon "$REQUIREMENTS" 'openstack_dashboard, magnum_ui, magnumclient, selenium' \
  django-admin -- "$@"
