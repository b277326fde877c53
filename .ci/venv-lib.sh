# shellcheck shell=bash
# Shared by the cached-virtualenv scripts (.ci/keystone-venv.sh, .ci/fuzz-venv.sh): sourced, not run.
#
#   cached_venv NAME REQUIREMENTS IMPORTS EXE... [-- ARGS]
#
# The venv lives outside the repository, in
#   ${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}/NAME-<first 12 hex of sha256(REQUIREMENTS)>
# so changing a pin gives a new directory. It counts as complete only when it holds the marker
# file `.complete`, written after a successful install, `python -c "import IMPORTS"` and a check
# that every EXE is in bin/; anything else in that directory is wiped and rebuilt. Prints the
# directory. With ARGS `--print-dir`, only prints it (no install).
#
# A caller that defines the shell function `venv_after_install` has it run with the venv's
# directory after the install and before the checks (part of the cached build); its text is
# hashed with REQUIREMENTS, so changing it gives a new directory too.
#
# Concurrent callers are serialized by an exclusive flock(2) on "$CACHE/NAME.lock" unless
# MAGNUM_CAPI_VENV_LOCK_HELD=1 says the caller holds it already.

cached_venv() {
  local name="$1" requirements="$2" imports="$3"
  shift 3
  local exes=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do exes+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  local cache="${MAGNUM_CAPI_CACHE:-$HOME/.cache/magnum-capi}"
  local hash
  hash="$({
    printf '%s\n' "$requirements"
    declare -f venv_after_install || true
  } | sha256sum | cut -c1-12)"
  local venv="$cache/$name-$hash"
  local marker="$venv/.complete"
  local python="${MAGNUM_CAPI_PYTHON:-python3}"

  if [ "${1:-}" = "--print-dir" ]; then
    printf '%s\n' "$venv"
    return 0
  fi

  mkdir -p "$cache"
  if [ "${MAGNUM_CAPI_VENV_LOCK_HELD:-}" != "1" ]; then
    exec 9>>"$cache/$name.lock"
    flock 9
  fi

  local complete=1 exe
  [ -f "$marker" ] && [ -x "$venv/bin/python" ] || complete=0
  for exe in "${exes[@]}"; do [ -x "$venv/bin/$exe" ] || complete=0; done
  if [ "$complete" = 1 ]; then
    printf '%s\n' "$venv"
    return 0
  fi

  echo "$name: building $venv" >&2
  local start
  start=$(date +%s)
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip >&2
  printf '%s\n' "$requirements" >"$venv/requirements.txt"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$venv/requirements.txt" >&2
  if declare -F venv_after_install >/dev/null; then venv_after_install "$venv" >&2; fi
  # Fail here, not in a test, if something did not install.
  "$venv/bin/python" -c "import $imports" >&2
  for exe in "${exes[@]}"; do
    [ -x "$venv/bin/$exe" ] || { echo "$name: $exe missing in $venv" >&2; return 1; }
  done
  {
    printf 'built %s in %ss\n' "$(date -u +%FT%TZ)" "$(($(date +%s) - start))"
    "$venv/bin/python" --version
    printf '%s\n' "$requirements"
  } >"$marker.tmp"
  mv "$marker.tmp" "$marker"
  echo "$name: done in $(($(date +%s) - start))s" >&2
  printf '%s\n' "$venv"
}
