"""schemathesis hooks of tests/fuzz_openapi.rs (loaded through SCHEMATHESIS_HOOKS)."""

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
