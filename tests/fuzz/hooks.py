"""schemathesis hooks of tests/it/fuzz_openapi.rs (loaded through SCHEMATHESIS_HOOKS)."""

import re
import time
from urllib.parse import urlsplit

import requests
import schemathesis


def _integral(value):
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, list):
        return [_integral(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    return value


@schemathesis.hook
def map_body(context, body):
    # The request parser reads JSON integers only: `2.0` is refused, as Magnum's WSME refuses it
    # (the integer fields' descriptions say so). JSON Schema cannot tell `2.0` from `2`, so
    # schemathesis spells integers as whole floats too; they go out as integers instead.
    return _integral(body)


# Paths whose DELETE is asynchronous, as in Magnum: the answer (204) means the driver was asked;
# the cluster or nodegroup stays readable in DELETE_IN_PROGRESS until the driver is done (with the
# test's simulated driver, milliseconds later). Templates are deleted at once and are not waited for.
_ASYNC_DELETE = re.compile(r"/v1/clusters/[^/]+(/nodegroups/[^/]+)?/?$")
_DELETE_WAIT_SECS = 30.0


@schemathesis.hook
def after_call(context, case, response):
    # A client waits for an asynchronous delete to finish before calling the resource gone (as
    # `openstack coe cluster delete` users and Terraform do); so does this run, before the next
    # step of a stateful scenario reads it. Without the wait, the use-after-free check (ST301)
    # raced the worker. If the resource never goes away, the wait ends and that check still fails.
    if case.method.upper() != "DELETE" or not 200 <= response.status_code < 300:
        return
    url = response.request.url
    if not _ASYNC_DELETE.search(urlsplit(url).path):
        return
    headers = {
        k: v
        for k, v in response.request.headers.items()
        if k.lower() not in ("content-length", "content-type")
    }
    deadline = time.monotonic() + _DELETE_WAIT_SECS
    while time.monotonic() < deadline:
        if requests.get(url, headers=headers, timeout=10).status_code == 404:
            return
        time.sleep(0.02)


@schemathesis.hook
def filter_failure(context, failure, case, response):
    # A project's quota after its DELETE is the default limit, not a 404: Magnum's quota show
    # falls back to `[quotas] max_clusters_per_project` when no explicit quota is set, and so
    # does ours. The stateful "deleted resource still available" check (ST301) does not apply
    # there (schemathesis runs the checks of the project config in the stateful phase, so the
    # exemption cannot be an [[operations]] setting).
    quota_show = case.operation.method.upper() == "GET" and case.operation.path.startswith(
        "/v1/quotas/"
    )
    return not (quota_show and getattr(failure, "code", None) == "ST301")
