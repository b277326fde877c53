"""Magnum's API as a WSGI application for gunicorn (the load benchmark's Magnum beside us,
benches/api_load.rs, and tests/it/magnum_beside.rs): the application of magnum_api.py (Magnum's
controllers, objects and policy, the object layer straight to the database as under
`magnum.wsgi.api`, which installs no conductor indirection either; identity from the request's
X-Project-Id/X-User-Id/X-Roles headers, no keystonemiddleware), on the database named by the
config file in $MAGNUM_CAPI_MAGNUM_CONF. oslo.config is given that file only, so gunicorn's own
command-line flags never reach it.

$MAGNUM_CAPI_MAGNUM_CATALOG, when set, is a JSON list of [service type, name, URL]: every request
then carries what keystonemiddleware would have put there after validating a token — an
X-Auth-Token and, in `keystone.token_info`, a v3 token body with the request's project, user and
roles and that catalog — so Magnum's create finds Glance, Nova and Neutron (the harness's fake
cloud) where a real deployment's catalog names them, and calls them with that token.

The create's cast to the conductor goes to oslo.messaging's `fake://` transport (the config file
sets it): a cast does not wait for the conductor, so the API answers its 202 as it would with
RabbitMQ; no conductor consumes it, so the API writes no cluster row (the conductor would).
"""
import copy
import json
import os

import magnum_api

# A token keystonemiddleware would have validated; Magnum only passes it on to the services.
TOKEN = "magnum-capi-beside-token"


def token_body(catalog):
    """The v3 token body of Keystone's validation answer, with `catalog`; project, user and
    roles are filled per request."""
    return {
        "token": {
            "methods": ["token"],
            "issued_at": "2026-01-01T00:00:00.000000Z",
            "expires_at": "2099-01-01T00:00:00.000000Z",
            "user": {"id": None, "name": None,
                     "domain": {"id": "default", "name": "Default"}},
            "project": {"id": None, "name": None,
                        "domain": {"id": "default", "name": "Default"}},
            "roles": [],
            "catalog": [
                {"type": kind, "name": name, "id": name,
                 "endpoints": [{"id": f"{name}-public", "interface": "public",
                                "region": "RegionOne", "region_id": "RegionOne",
                                "url": url}]}
                for kind, name, url in catalog
            ],
        }
    }


def with_token_info(app, catalog):
    body = token_body(catalog)

    def wrapped(environ, start_response):
        info = copy.deepcopy(body)
        t = info["token"]
        t["user"]["id"] = t["user"]["name"] = environ.get("HTTP_X_USER_ID")
        t["project"]["id"] = t["project"]["name"] = environ.get("HTTP_X_PROJECT_ID")
        t["roles"] = [{"id": r, "name": r}
                      for r in environ.get("HTTP_X_ROLES", "").split(",") if r]
        environ["keystone.token_info"] = info
        environ.setdefault("HTTP_X_AUTH_TOKEN", TOKEN)
        return app(environ, start_response)

    return wrapped


application = magnum_api.application(os.environ["MAGNUM_CAPI_MAGNUM_CONF"])
if os.environ.get("MAGNUM_CAPI_MAGNUM_CATALOG"):
    application = with_token_info(application,
                                  json.loads(os.environ["MAGNUM_CAPI_MAGNUM_CATALOG"]))
