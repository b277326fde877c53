#!/usr/bin/env bash
# Stops everything tests/realstack/up.sh started (its whole process group: the harness, the
# management cluster and its controllers, Keystone, the fake cloud and magnum-capi).
set -euo pipefail
state=${REALSTACK_STATE:-/tmp/magnum-capi-realstack}
if [ ! -f "$state/pid" ]; then
  echo "nothing to stop ($state/pid is missing)"
  exit 0
fi
pid=$(cat "$state/pid")
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL -- "-$pid" 2>/dev/null || true
fi
rm -f "$state/pid" "$state/env"
echo "stopped"
