#!/usr/bin/env bash
# Import time and memory for a Magnum of N clusters × 2 nodegroups (issue 25; not a timed test).
#
#   benches/import_scale.sh [N]        default N=10000; builds the release binary first
#
# Starts a private MariaDB (Magnum 23.0.0's own schema, `magnum-db-manage upgrade` from
# .ci/magnum-venv.sh) and a private PostgreSQL (Debian's binaries), both on loopback in a
# temporary directory removed at exit, run as the `mysql` / `postgres` users when this runs as
# root. Fills Magnum by SQL (30 templates, N clusters with labels, a master and a worker
# nodegroup each, a quota per project), then measures with /usr/bin/time: the first import, a
# second one (nothing changes), and a dry run. Prints wall time and peak RSS of each.
set -euo pipefail
cd "$(dirname "$0")/.."

N="${1:-10000}"
BIN="${MAGNUM_CAPI_BIN:-target/release/magnum-capi}"
if [ -z "${MAGNUM_CAPI_BIN:-}" ]; then
  cargo build --release --quiet
fi
VENV="$(bash .ci/magnum-venv.sh 23.0.0)"
PGBIN=""
for d in /usr/lib/postgresql/*/bin; do PGBIN="$d"; done # the newest major installed

work="$(mktemp -d /tmp/import-scale.XXXXXX)"
chmod 755 "$work"
pids=()
cleanup() {
  # The servers run under runuser, which does not pass a signal on: stop them by their own means.
  if [ -S "$work/my/sock" ]; then
    mariadb --no-defaults --socket="$work/my/sock" -u root -e SHUTDOWN 2>/dev/null || true
  fi
  if [ -d "$work/pg/data" ]; then
    as_user postgres "$PGBIN/pg_ctl" -D "$work/pg/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

as_user() { # as_user USER CMD...: run as USER when root, else as ourselves
  local u="$1"
  shift
  if [ "$(id -u)" = 0 ]; then runuser -u "$u" -- "$@"; else "$@"; fi
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- MariaDB with Magnum's schema ---
mkdir -p "$work/my"
[ "$(id -u)" = 0 ] && chown mysql:mysql "$work/my"
as_user mysql mariadb-install-db --no-defaults --datadir="$work/my/data" \
  --auth-root-authentication-method=normal --skip-test-db >/dev/null
myport="$(free_port)"
as_user mysql /usr/sbin/mariadbd --no-defaults --datadir="$work/my/data" --socket="$work/my/sock" \
  --port="$myport" --bind-address=127.0.0.1 --skip-name-resolve 2>"$work/my/log" &
pids+=($!)
for _ in $(seq 200); do [ -S "$work/my/sock" ] && break; sleep 0.1; done
my() { mariadb --no-defaults --socket="$work/my/sock" -u root "$@"; }
my -e "CREATE DATABASE magnum; CREATE USER 'magnum'@'%' IDENTIFIED BY 'bench'; GRANT ALL ON magnum.* TO 'magnum'@'%';"
printf '[database]\nconnection = mysql+pymysql://magnum:bench@127.0.0.1:%s/magnum\n' "$myport" >"$work/magnum.conf"
"$VENV/bin/magnum-db-manage" --config-file "$work/magnum.conf" upgrade 2>/dev/null

echo "filling Magnum with $N clusters × 2 nodegroups"
t0=$(date +%s)
python3 - "$N" >"$work/fill.sql" <<'EOF'
import json, sys, uuid
n = int(sys.argv[1])
labels = json.dumps({f"label_{k}": f"value-{k}" for k in range(11)})
print("SET autocommit=0;")
tpl = [str(uuid.UUID(int=0x7e1f << 96 | t)) for t in range(30)]
for t, u in enumerate(tpl):
    print("INSERT INTO cluster_template (uuid, project_id, user_id, name, coe, image_id, "
          "cluster_distro, server_type, labels, public, hidden, registry_enabled, tls_disabled, "
          "master_lb_enabled, floating_ip_enabled, driver, created_at) VALUES "
          f"('{u}', 'bench', 'bench-user', 'tpl-{t}', 'kubernetes', 'ubuntu-2204', 'ubuntu', 'vm', "
          f"'{labels}', 0, 0, 0, 0, 1, 1, 'k8s_capi_helm_v1', '2024-01-01 00:00:00');")
for batch in range(0, n, 1000):
    cl, ng = [], []
    for i in range(batch, min(n, batch + 1000)):
        cu = str(uuid.UUID(int=0xc1a5 << 96 | i))
        cl.append(f"('{cu}', 'project-{i % 100}', 'bench-user', 'cluster-{i}', '{tpl[i % 30]}', "
                  f"'{labels}', 'cluster-{i}-{i:012d}', 'CREATE_COMPLETE', 'done', 'HEALTHY', "
                  "'{\"api\": \"ok\"}', 60, 1, 0, '2024-02-01 00:00:00')")
        for k, role in enumerate(("master", "worker")):
            nu = str(uuid.UUID(int=(0x9e00 + k) << 96 | i))
            ng.append(f"('{nu}', 'default-{role}', '{cu}', 'project-{i % 100}', '{{}}', "
                      f"'[\"10.{i // 65536}.{(i // 256) % 256}.{i % 256}\"]', {1 if k == 0 else 2}, "
                      f"'{role}', 0, 1, 'CREATE_COMPLETE', '2024-02-01 00:00:00')")
    print("INSERT INTO cluster (uuid, project_id, user_id, name, cluster_template_id, labels, "
          "stack_id, status, status_reason, health_status, health_status_reason, create_timeout, "
          "floating_ip_enabled, master_lb_enabled, created_at) VALUES " + ",".join(cl) + ";")
    print("INSERT INTO nodegroup (uuid, name, cluster_id, project_id, labels, node_addresses, "
          "node_count, role, min_node_count, is_default, status, created_at) VALUES "
          + ",".join(ng) + ";")
for p in range(100):
    print("INSERT INTO quotas (project_id, resource, hard_limit, created_at) VALUES "
          f"('project-{p}', 'Cluster', 1000, '2024-01-01 00:00:00');")
print("COMMIT;")
EOF
my magnum <"$work/fill.sql"
echo "filled in $(($(date +%s) - t0)) s"

# --- PostgreSQL for magnum-capi ---
mkdir -p "$work/pg"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work/pg"
as_user postgres "$PGBIN/initdb" -D "$work/pg/data" -U postgres -A trust >/dev/null
pgport="$(free_port)"
as_user postgres "$PGBIN/postgres" -D "$work/pg/data" -p "$pgport" -k "$work/pg" \
  -c listen_addresses=127.0.0.1 -c fsync=off 2>"$work/pg/log" &
pids+=($!)
for _ in $(seq 200); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$pgport" && break; sleep 0.1; done
export MAGNUM_CAPI__DATABASE__URL="postgres://postgres@127.0.0.1:$pgport/postgres"
"$BIN" migrate >/dev/null 2>&1

MAGNUM_DB="mysql://magnum:bench@127.0.0.1:$myport/magnum"
measure() { # measure LABEL ARGS...
  local label="$1"
  shift
  /usr/bin/time -f '%e %M' -o "$work/time" "$BIN" import --magnum-db "$MAGNUM_DB" "$@" >"$work/report"
  read -r secs kib <"$work/time"
  printf '%-28s %6.1f s  peak RSS %5.0f MiB  %s\n' "$label" "$secs" "$((kib / 1024))" \
    "$(tail -1 "$work/report" | cut -c1-120)"
}
echo "import of $N clusters × 2 nodegroups ($BIN):"
measure "first import"
measure "second import (no change)"
measure "dry run" --dry-run
