"""Horizon's settings for tests/it/client_horizon_browser.rs.

Horizon's settings.py ends its defaults with `from local.local_settings import *` and only then
derives the rest (template loaders, static directories, URLs) from them. It appends its own
directory to sys.path, so this package, earlier on PYTHONPATH, is the `local` it imports: the
cached virtualenv stays untouched. Everything comes from the environment the test sets.
"""

import os

from openstack_dashboard.settings import MIDDLEWARE

DEBUG = False
ALLOWED_HOSTS = ['127.0.0.1', 'localhost']
SECRET_KEY = 'horizon-browser-test'
WEBROOT = '/'

OPENSTACK_KEYSTONE_URL = os.environ.get('HORIZON_KEYSTONE_URL', 'http://127.0.0.1:5000/v3')
OPENSTACK_KEYSTONE_DEFAULT_DOMAIN = 'Default'
# Horizon's names for the catalog's `public` interface.
OPENSTACK_ENDPOINT_TYPE = 'publicURL'
OPENSTACK_KEYSTONE_ENDPOINT_TYPE = 'publicURL'
SECONDARY_ENDPOINT_TYPE = None

# No memcached here. Sessions in files (local-memory sessions are evicted by
# django-compressor's cache entries; cookies are too small for Horizon's token and catalog).
CACHES = {'default': {'BACKEND': 'django.core.cache.backends.locmem.LocMemCache'}}
SESSION_ENGINE = 'django.contrib.sessions.backends.file'
SESSION_FILE_PATH = os.environ.get('HORIZON_SESSION_DIR')

# The pages' scripts and styles are compressed once, when .ci/horizon-venv.sh builds the venv
# (`django-admin compress` with these settings): a page then loads a few files instead of 600,
# and renders in milliseconds instead of seconds. `runserver --insecure` serves them.
COMPRESS_ENABLED = True
COMPRESS_OFFLINE = True

# magnum-ui 19's cluster dialog lists availability zones by `zoneName` (novaclient's field) while
# Horizon 27 answers openstacksdk's `name`: the zone field, which is required, could never be
# filled. Not ours and not Magnum's; the middleware adds `zoneName` (see zone_name.py).
MIDDLEWARE = tuple(MIDDLEWARE) + ('local.zone_name.ZoneName',)

LOGGING = {
    'version': 1,
    'disable_existing_loggers': False,
    'handlers': {'console': {'class': 'logging.StreamHandler', 'level': 'INFO'}},
    'loggers': {
        'django.request': {'handlers': ['console'], 'level': 'WARNING'},
        'horizon': {'handlers': ['console'], 'level': 'WARNING'},
        'openstack_dashboard': {'handlers': ['console'], 'level': 'WARNING'},
        'openstack_auth': {'handlers': ['console'], 'level': 'WARNING'},
        'magnum_ui': {'handlers': ['console'], 'level': 'WARNING'},
    },
}
