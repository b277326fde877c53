"""Magnum's own API answers for the import tests (tests/it/import_magnum.rs).

Runs the real Magnum API application (pecan, Magnum's controllers, objects and policy) in this
process against the Magnum database named in the config file given as argv[1], with the
object layer going straight to the database (no conductor, no RabbitMQ: the
`indirection_api` magnum-api installs is left unset) and identity from request headers (no
keystonemiddleware). Reads a JSON list of requests on stdin:
    [{"path": "/v1/clusters/<uuid>", "version": "1.1", "project": "p", "user": "u",
      "roles": "admin,member,reader"}, ...]
and prints one JSON list of {"status": int, "body": <JSON or null>} in the same order.
"""
import json
import sys

from oslo_log import log

import magnum.conf
from magnum.api import app as api_app
from magnum.common import policy
from magnum.common import rpc
import webob


def application(conf_file):
    """Magnum's API application on the database named in `conf_file` (also what
    magnum_wsgi.py serves under gunicorn for the benchmark)."""
    conf = magnum.conf.CONF
    # The API's error hook reads `debug` (magnum-api registers oslo.log's options at start).
    log.register_options(conf)
    conf(["--config-file", conf_file], project="magnum")
    # The API hooks build an RPC client per request (the config sets `transport_url =
    # fake://`); nothing is ever sent on it here.
    rpc.init(conf)
    if hasattr(policy, "add_policy_attributes"):
        # Releases with trusts look the trustee domain up in Keystone on every policy check
        # (there is no Keystone here); Magnum's default rules never read it.
        def no_trustee_domain(target):
            target["trustee_domain_id"] = None
            return target

        policy.add_policy_attributes = no_trustee_domain
    return api_app.setup_app()


def main():
    app = application(sys.argv[1])
    out = []
    for r in json.load(sys.stdin):
        headers = {
            "Accept": "application/json",
            "OpenStack-API-Version": "container-infra " + r.get("version", "latest"),
            "X-User-Id": r.get("user", "admin-user"),
            "X-Project-Id": r.get("project", "admin-project"),
            "X-Roles": r.get("roles", "admin,member,reader"),
        }
        req = webob.Request.blank(r["path"], headers=headers)
        resp = req.get_response(app)
        try:
            body = json.loads(resp.body) if resp.body else None
        except ValueError:
            body = resp.body.decode("utf-8", "replace")
        out.append({"status": resp.status_int, "body": body})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
