#!/usr/bin/env bash
# Builds (or reuses) the Python virtualenv with a real Keystone and the OpenStack clients that the
# integration tests run against (tests/common/keystone.rs calls this script).
#
#   .ci/keystone-venv.sh              ensure the venv exists; print its directory
#   .ci/keystone-venv.sh --print-dir  only print the directory it would use (no install)
#
# The venv lives outside the repository, in
#   ${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}/venv-<first 12 hex of sha256(REQUIREMENTS)>
# so changing a pin gives a new directory. A venv counts as complete only when it holds the
# marker file `.complete`, written after a successful install and import check; anything else in
# that directory is wiped and rebuilt (see .ci/venv-lib.sh).
#
# Concurrent callers are serialized by an exclusive flock(2) on "$CACHE/venv.lock". The Rust
# harness takes that lock itself (std::fs::File::lock) and sets MAGNUM_CAPI_VENV_LOCK_HELD=1 so
# this script does not try to take it a second time.
#
# Fresh install: about 50 s on a 2-core machine with an empty pip cache.
set -euo pipefail

# The pinned set (all exist on PyPI and install together with Python 3.11). psycopg2-binary is
# SQLAlchemy's PostgreSQL driver: the test Keystone keeps its database in the harness's PostgreSQL.
REQUIREMENTS='keystone==30.0.0
gunicorn==27.0.1
python-openstackclient==10.5.0
python-magnumclient==5.0.0
openstacksdk==4.22.0
psycopg2-binary==2.9.13'

# shellcheck source=.ci/venv-lib.sh
. "$(dirname "$0")/venv-lib.sh"
cached_venv venv "$REQUIREMENTS" 'keystone.server.wsgi, gunicorn, openstackclient, magnumclient, openstack, psycopg2' \
  keystone-manage gunicorn openstack -- "$@"
