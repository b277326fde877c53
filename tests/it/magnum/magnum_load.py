"""Writes fixtures into a Magnum database through Magnum's own db API (its SQLAlchemy models, so
labels, node addresses and taints are stored exactly as Magnum stores them), for the import tests
(tests/it/import_magnum.rs). argv[1] is the config file naming the database; stdin is a JSON
object of lists: {"templates": [...], "clusters": [...], "nodegroups": [...], "quotas": [...],
"update_clusters": [{"uuid": ..., "values": {...}}]}. Columns the release's models do not have
(`driver` before 2024.1, `node_labels`/`node_taints` before 2026.1) are left out, as a client of
that release could not have set them.
"""
import datetime
import json
import sys

import magnum.conf
from magnum.db import api as db_api
from magnum.db.sqlalchemy import models


def only_columns(model, values):
    columns = model.__table__.columns
    out = {}
    for k, v in values.items():
        if k not in columns:
            continue
        if k in ("created_at", "updated_at") and v is not None:
            v = datetime.datetime.strptime(v, "%Y-%m-%d %H:%M:%S")
        out[k] = v
    return out


def main():
    magnum.conf.CONF(["--config-file", sys.argv[1]], project="magnum")
    dbapi = db_api.get_instance()
    data = json.load(sys.stdin)
    for t in data.get("templates", []):
        dbapi.create_cluster_template(only_columns(models.ClusterTemplate, t))
    for c in data.get("clusters", []):
        dbapi.create_cluster(only_columns(models.Cluster, c))
    for n in data.get("nodegroups", []):
        dbapi.create_nodegroup(only_columns(models.NodeGroup, n))
    for q in data.get("quotas", []):
        dbapi.create_quota(only_columns(models.Quota, q))
    for u in data.get("update_clusters", []):
        dbapi.update_cluster(u["uuid"], only_columns(models.Cluster, u["values"]))


if __name__ == "__main__":
    main()
