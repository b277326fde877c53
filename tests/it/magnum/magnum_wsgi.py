"""Magnum's API as a WSGI application for gunicorn (the load benchmark's Magnum beside us,
benches/api_load.rs): the application of magnum_api.py (Magnum's controllers, objects and policy,
the object layer straight to the database as under `magnum.wsgi.api`, which installs no conductor
indirection either; identity from the request's X-Project-Id/X-User-Id/X-Roles headers, no
keystonemiddleware), on the database named by the config file in $MAGNUM_CAPI_MAGNUM_CONF.
oslo.config is given that file only, so gunicorn's own command-line flags never reach it.
"""
import os

import magnum_api

application = magnum_api.application(os.environ["MAGNUM_CAPI_MAGNUM_CONF"])
