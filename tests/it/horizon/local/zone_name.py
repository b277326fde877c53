"""Adds magnum-ui 19's `zoneName` to Horizon 27's availability zones (see local_settings.py)."""

import json


class ZoneName:
    PATH = '/api/nova/availzones/'

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.path != self.PATH or response.status_code != 200:
            return response
        body = json.loads(response.content)
        for zone in body.get('items', []):
            zone.setdefault('zoneName', zone.get('name'))
        response.content = json.dumps(body).encode()
        return response
