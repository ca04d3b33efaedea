"""``--web.config.file``: TLS, basic auth and response headers for the HTTP endpoints.

The file has the format every Prometheus exporter reads (the exporter-toolkit's
web-config): ``tls_server_config`` (:mod:`.tls`), ``basic_auth_users`` (bcrypt hashes,
:mod:`.auth`) and ``http_server_config`` (:mod:`.schema`, which reads the whole file).
:class:`WebConfig` is one loaded file (:mod:`.load`); the web server asks its provider for
the current one at each connection (TLS) and request (auth, headers), so a file re-read
takes effect without a restart. :class:`WebConfigWatcher` (:mod:`.reload`) keeps the last
good one in force and re-reads the file (and the certificate, key and CA files it names)
when they change.

What Python's ``ssl`` cannot do the way Go's ``crypto/tls`` does is refused by name,
never approximated: ``client_auth_type: RequireAnyClientCert`` (a certificate required
but not verified), ``client_allowed_sans``, more than one ``curve_preferences`` entry and
``rate_limit``. docs/security.md has the whole table. ``RequireAndVerifyClientCert``
verifies a certificate at the handshake when one is given, and is enforced per request
outside ``/healthz`` and ``/readyz`` (:attr:`WebConfig.client_cert_required`), so that the
kubelet's probes, which send none, get through.
"""

from podres_exporter.daemon.web.config.auth import BCRYPT_MAX_PASSWORD_BYTES
from podres_exporter.daemon.web.config.load import WebConfig, WebConfigProvider, load_web_config
from podres_exporter.daemon.web.config.reload import WebConfigWatcher

__all__ = [
    "BCRYPT_MAX_PASSWORD_BYTES",
    "WebConfig",
    "WebConfigProvider",
    "WebConfigWatcher",
    "load_web_config",
]
