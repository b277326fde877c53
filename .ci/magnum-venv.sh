#!/usr/bin/env bash
# Builds (or reuses) a Python virtualenv with the real Magnum of one release from PyPI, whose own
# migrations (`magnum-db-manage upgrade`) create the Magnum schemas the import tests read
# (tests/it/common/magnum.rs calls this script).
#
#   .ci/magnum-venv.sh VERSION              ensure the venv exists; print its directory
#   .ci/magnum-venv.sh VERSION --print-dir  only print the directory it would use (no install)
#
# VERSION is one of the releases the tests cover: 23.0.0 (the newest: no trust columns,
# nodegroup node_labels/node_taints), 19.0.1 (2024.2: trust columns, template `driver`) and
# 17.0.2 (2023.2: trust columns, no `driver`). 17.0.2 does not run with today's libraries
# (oslo.db 15 dropped the EngineFacade it uses, SQLAlchemy 2 its queries): it is pinned to the
# 2023.2 versions of the libraries it breaks with. Cached like the Keystone venv (.ci/venv-lib.sh):
#   ${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}/magnum-<VERSION>-<first 12 hex of sha256(REQUIREMENTS)>
# PyMySQL is SQLAlchemy's MySQL driver (the schema lives on the harness's MariaDB). Fresh
# install: about 60 s each.
set -euo pipefail

version="${1:?usage: magnum-venv.sh VERSION [--print-dir]}"
shift
case "$version" in
  # The newest also serves its API under gunicorn for the load benchmark (benches/api_load.rs),
  # with a driver for the bench's template (vm, ubuntu, kubernetes): the CAPI Helm driver from
  # PyPI, as the environment notes measured Magnum's create (without a loaded driver every create
  # is a 400). Changing a pin changes the cache directory's hash, so the venv is rebuilt.
  23.0.0) PINS='
gunicorn==27.0.1
magnum-capi-helm==1.4.0' ;;
  19.0.1) PINS='' ;;
  17.0.2)
    PINS='
SQLAlchemy==1.4.49
alembic==1.9.4
eventlet==0.33.3
oslo.config==9.2.0
oslo.context==5.2.0
oslo.db==14.1.0
oslo.log==5.3.0
oslo.messaging==14.4.1
oslo.policy==4.2.1
oslo.service==3.1.1
oslo.utils==6.2.1
oslo.versionedobjects==3.2.0' ;;
  *) echo "magnum-venv.sh: unsupported Magnum version $version (23.0.0, 19.0.1 or 17.0.2)" >&2; exit 2 ;;
esac

REQUIREMENTS="magnum==$version
PyMySQL==1.1.2$PINS"

# shellcheck source=.ci/venv-lib.sh
. "$(dirname "$0")/venv-lib.sh"
case "$version" in
  23.0.0) IMPORTS='magnum.db.sqlalchemy.models, pymysql, magnum_capi_helm.driver' ;;
  *) IMPORTS='magnum.db.sqlalchemy.models, pymysql' ;;
esac
cached_venv "magnum-$version" "$REQUIREMENTS" "$IMPORTS" \
  magnum-db-manage -- "$@"
