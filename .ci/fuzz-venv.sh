#!/usr/bin/env bash
# Builds (or reuses) the Python virtualenv with schemathesis, the schema-driven fuzzer that
# tests/fuzz_openapi.rs runs against the service (`serve --dev` equivalent) and openapi.yaml.
#
#   .ci/fuzz-venv.sh              ensure the venv exists; print its directory
#   .ci/fuzz-venv.sh --print-dir  only print the directory it would use (no install)
#
# Cached like the Keystone venv (.ci/venv-lib.sh):
#   ${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}/fuzz-venv-<first 12 hex of sha256(REQUIREMENTS)>
# complete when it holds `.complete`; builds serialized by flock on "$CACHE/fuzz-venv.lock".
#
# A venv of its own, although schemathesis co-installs cleanly with the Keystone pins (pip's
# resolver only adds packages there): the fuzz test needs no Keystone, and a schemathesis bump
# should not rebuild the Keystone venv. Fresh install: about 20 s.
set -euo pipefail

REQUIREMENTS='schemathesis==4.32.5'

# shellcheck source=.ci/venv-lib.sh
. "$(dirname "$0")/venv-lib.sh"
cached_venv fuzz-venv "$REQUIREMENTS" 'schemathesis' st -- "$@"
