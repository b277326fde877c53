#!/usr/bin/env bash
# Builds (or reuses) the Python virtualenv with helm-python-sdk, which ships the Helm engine as a
# shared library (no helm binary installs here): tests/it/chart.rs renders deploy/helm/magnum-capi
# with it (.ci/helm-render.py), and deploy/kubernetes/generate.sh writes the plain manifests.
#
#   .ci/helm-venv.sh              ensure the venv exists; print its directory
#   .ci/helm-venv.sh --print-dir  only print the directory it would use (no install)
#
# Cached like the Keystone venv (.ci/venv-lib.sh):
#   ${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}/helm-venv-<first 12 hex of sha256(REQUIREMENTS)>
# complete when it holds `.complete`; builds serialized by flock on "$CACHE/helm-venv.lock".
set -euo pipefail

REQUIREMENTS='helm-python-sdk==0.2.2'

# shellcheck source=.ci/venv-lib.sh
. "$(dirname "$0")/venv-lib.sh"
cached_venv helm-venv "$REQUIREMENTS" 'helm_python.chart' -- "$@"
