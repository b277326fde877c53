"""What Magnum's own WSME request types do with request bodies (tests/it/api_empty_strings.rs).

Parses each body with WSME's `fromjson`, as Magnum's API does before any handler runs, against
the type Magnum 23 declares for that request. Reads a JSON list on stdin:
    [{"type": "Cluster", "body": {"cluster_template_id": "t", "discovery_url": ""}}, ...]
and prints one JSON list of {"takes": bool, "error": str} in the same order. Needs no
configuration, database or network: only Magnum's API types.
"""
import json
import sys
import warnings

warnings.simplefilter("ignore")

from magnum.api.controllers.v1 import certificate  # noqa: E402
from magnum.api.controllers.v1 import cluster  # noqa: E402
from magnum.api.controllers.v1 import cluster_actions  # noqa: E402
from magnum.api.controllers.v1 import cluster_template  # noqa: E402
from magnum.api.controllers.v1 import nodegroup  # noqa: E402
from magnum.api.controllers.v1 import quota  # noqa: E402
from magnum.api import utils as api_utils  # noqa: E402
from wsme.rest import json as wsme_json  # noqa: E402

TYPES = {
    "ClusterTemplate": cluster_template.ClusterTemplate,
    "Cluster": cluster.Cluster,
    "NodeGroup": nodegroup.NodeGroup,
    "Quota": quota.Quota,
    "Certificate": certificate.Certificate,
    "ClusterResizeRequest": cluster_actions.ClusterResizeRequest,
    "ClusterUpgradeRequest": cluster_actions.ClusterUpgradeRequest,
}


class _Named:
    """The cluster a certificate's `cluster_uuid` names (there is no database here)."""

    def __init__(self, ident):
        self.uuid = ident


def main():
    # The certificate type's `cluster_uuid` setter looks the cluster up: every name exists here.
    api_utils.get_resource = lambda _kind, ident: _Named(ident)
    out = []
    for r in json.load(sys.stdin):
        try:
            wsme_json.fromjson(TYPES[r["type"]], r["body"])
            out.append({"takes": True, "error": ""})
        except Exception as e:  # noqa: BLE001 - every refusal is an answer here
            try:
                why = str(e)
            except Exception:  # noqa: BLE001 - some of Magnum's exceptions cannot print
                why = type(e).__name__
            out.append({"takes": False, "error": why})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
