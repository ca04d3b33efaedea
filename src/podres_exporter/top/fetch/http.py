"""One HTTP GET for the sources that read over the network, and their URL checks."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

from podres_exporter.core.errors import ConfigError
from podres_exporter.top.fetch.source import fetch_error

HTTP_TIMEOUT_S = 5.0


def http_get(url: str, what: str, timeout_s: float) -> bytes:
    """GET ``url``; FetchError naming ``what`` (e.g. ``the exporter at URL (--exporter)``)."""
    req = urllib.request.Request(url, headers={"Accept": "text/plain, application/json"})  # noqa: S310 - the URL's scheme is checked to be http(s)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310
            body: bytes = resp.read()
            return body
    except urllib.error.HTTPError as err:
        detail = err.read()[:300].decode(errors="replace").strip()
        raise fetch_error(
            f"{what} answered HTTP {err.code} for {url}: {detail or err.reason}", exit_code=1
        ) from err
    except urllib.error.URLError as err:
        raise fetch_error(f"cannot reach {what}: {err.reason}", exit_code=2) from err
    except (TimeoutError, ConnectionError) as err:
        raise fetch_error(f"cannot reach {what}: {err}", exit_code=2) from err


def http_url(url: str, flag: str) -> urllib.parse.SplitResult:
    """``url`` (``http://`` assumed when it names no scheme) split; ConfigError naming ``flag``
    unless it is http(s) with a host."""
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{flag} {url!r}: expected http://HOST:PORT")
    return parts
