"""The HTTP face of both daemons: ``/metrics``, ``/healthz``, ``/readyz``, ``/`` and 404.

Its rooms, by job: :mod:`.site` (what is served, the format negotiation, the auth
decision), :mod:`.http` (HTTP/1.1 framing: heads read, parsed and written), :mod:`.send`
(the one way an answer leaves, and closing), :mod:`.limits` (the limits, the connection
cap), :mod:`.respond` (a request's answer: web config, auth, the site, its pools),
:mod:`.server` (the loop, its listening socket and its connections) and
:mod:`.config` (``--web.config.file``: schema, TLS, basic auth, reload).
"""

from podres_exporter.daemon.web.http import Body
from podres_exporter.daemon.web.limits import Limits, connection_cap
from podres_exporter.daemon.web.server import WebServer, display_url
from podres_exporter.daemon.web.site import (
    Check,
    Index,
    MetricsBody,
    Site,
    accepts_gzip,
    registry_metrics,
    render_registry,
)

__all__ = [
    "Body",
    "Check",
    "Index",
    "Limits",
    "MetricsBody",
    "Site",
    "WebServer",
    "accepts_gzip",
    "connection_cap",
    "display_url",
    "registry_metrics",
    "render_registry",
]
