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
# that directory is wiped and rebuilt.
#
# Concurrent callers are serialized by an exclusive flock(2) on "$CACHE/venv.lock". The Rust
# harness takes that lock itself (std::fs::File::lock) and sets MAGNUM_CAPI_VENV_LOCK_HELD=1 so
# this script does not try to take it a second time.
#
# Fresh install: about 50 s on a 2-core machine with an empty pip cache.
set -euo pipefail

# The pinned set (all exist on PyPI and install together with Python 3.11).
REQUIREMENTS='keystone==30.0.0
gunicorn==27.0.1
python-openstackclient==10.5.0
python-magnumclient==5.0.0
openstacksdk==4.22.0'

CACHE="${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}"
HASH="$(printf '%s\n' "$REQUIREMENTS" | sha256sum | cut -c1-12)"
VENV="$CACHE/venv-$HASH"
MARKER="$VENV/.complete"
PYTHON="${MAGNUM_CAPI_PYTHON:-python3}"

if [ "${1:-}" = "--print-dir" ]; then
  printf '%s\n' "$VENV"
  exit 0
fi

mkdir -p "$CACHE"
if [ "${MAGNUM_CAPI_VENV_LOCK_HELD:-}" != "1" ]; then
  exec 9>>"$CACHE/venv.lock"
  flock 9
fi

if [ -f "$MARKER" ] && [ -x "$VENV/bin/python" ] && [ -x "$VENV/bin/gunicorn" ]; then
  printf '%s\n' "$VENV"
  exit 0
fi

echo "keystone-venv: building $VENV" >&2
start=$(date +%s)
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip >&2
printf '%s\n' "$REQUIREMENTS" >"$VENV/requirements.txt"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$VENV/requirements.txt" >&2
# Fail here, not in a test, if something did not install.
"$VENV/bin/python" -c 'import keystone.server.wsgi, gunicorn, openstackclient, magnumclient, openstack' >&2
for exe in keystone-manage gunicorn openstack; do
  [ -x "$VENV/bin/$exe" ] || { echo "keystone-venv: $exe missing in $VENV" >&2; exit 1; }
done
{
  printf 'built %s in %ss\n' "$(date -u +%FT%TZ)" "$(($(date +%s) - start))"
  "$VENV/bin/python" --version
  printf '%s\n' "$REQUIREMENTS"
} >"$MARKER.tmp"
mv "$MARKER.tmp" "$MARKER"
echo "keystone-venv: done in $(($(date +%s) - start))s" >&2
printf '%s\n' "$VENV"
