"""Loaded (through PYTHONPATH) by the fake Daytona server that test_daytona_bridge.py starts.

tests/fixtures/fake_daytona.py caches a request's body in `self._body` on its handler, and
http.server keeps one handler object per TCP connection: on a kept-alive connection the second
request is served with the first one's body ("request body must be a JSON object"). Real
Daytona has no such problem and libcurl reuses connections, so the C client is tested with
keep-alive on: this clears the cache before every request. Remove it once the fixture resets
`_body` per request itself (one line at the top of Handler.dispatch).
"""
import http.server

_handle_one_request = http.server.BaseHTTPRequestHandler.handle_one_request


def handle_one_request(self):
    self.__dict__.pop("_body", None)
    return _handle_one_request(self)


http.server.BaseHTTPRequestHandler.handle_one_request = handle_one_request
