"""The web-config file's format, as every Prometheus exporter reads it (the
exporter-toolkit's web-config): the top-level keys, ``http_server_config``, and the whole
file parsed and checked before any certificate is read."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

import yaml

from podres_exporter.daemon.web.config.auth import parse_users
from podres_exporter.daemon.web.config.source import Source, kind
from podres_exporter.daemon.web.config.tls import TlsSpec, parse_tls

# ------------------------------------------------------------------------ the file format

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
_HTTP_KEYS = ("http2", "headers")


# The response headers the toolkit lets a web-config set, with their allowed values
# (None: any). Its list is closed on purpose, for the same headers across exporters.
_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}

# A header value goes on the wire as it is: printable ASCII and tab only (no line break
# to inject a header, nothing a latin-1 or ASCII encoding could fail on).
UNPRINTABLE = re.compile(r"[^\t\x20-\x7e]")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 5.6.2


class _Loader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses a key given twice in one mapping, as the toolkit's
    strict unmarshal does (the second ``alice:`` would silently replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            with contextlib.suppress(TypeError):  # unhashable: the constructor says so
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found the key {key!r} twice",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True, slots=True)
class Spec:
    """A parsed file before any certificate is read: what it says, checked."""

    tls: TlsSpec | None
    users: dict[str, bytes]
    headers: tuple[tuple[str, str], ...]

    @property
    def files(self) -> tuple[str, ...]:
        """The files it refers to (certificate, key, CA), watched for changes."""
        if self.tls is None:
            return ()
        pems = (self.tls.cert, self.tls.key, self.tls.client_ca)
        return tuple(p.path for p in pems if p is not None and p.path is not None)


def parse(source: Source) -> Spec:
    """The file's content, checked; reads no certificate."""
    raw = source.read(source.path, "")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        source.fail("", f"is not UTF-8 text (byte {raw[err.start]:#04x} at offset {err.start})")
    try:
        document = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError as err:
        source.fail("", "is not valid YAML: " + _yaml_problem(err))
    except RecursionError:
        source.fail("", "nests too deeply to be a web config")
    if document is None:
        source.fail(
            "",
            "is empty: give it tls_server_config or basic_auth_users, or leave out "
            "--web.config.file for plain, open HTTP",
        )
    top = source.mapping(document, "", _TOP_KEYS)
    if "rate_limit" in top:
        source.fail("rate_limit", "is not supported by podres: remove it")
    return Spec(
        tls=parse_tls(source, top.get("tls_server_config")),
        users=parse_users(source, top.get("basic_auth_users")),
        headers=_parse_http(source, top.get("http_server_config")),
    )


def _yaml_problem(err: yaml.YAMLError) -> str:
    """Where and what, without pyyaml's snippet of the line: that line may hold a secret
    (an inline key, a hash)."""
    if not isinstance(err, yaml.MarkedYAMLError):
        return " ".join(str(err).split())
    mark = err.problem_mark or err.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = ", ".join(part for part in (err.context, err.problem) if part)
    return where + (what or "cannot be parsed")


def _parse_http(source: Source, value: object) -> tuple[tuple[str, str], ...]:
    where = "http_server_config"
    http = source.mapping(value, where, _HTTP_KEYS)
    if "http2" in http:
        # Accepted for files shared with other exporters; podres speaks HTTP/1.1 only,
        # which every HTTP/2 client falls back to (ALPN offers http/1.1 alone).
        source.boolean(http["http2"], f"{where}.http2")
    headers = http.get("headers")
    if headers is None:
        return ()
    if not isinstance(headers, dict):
        source.fail(f"{where}.headers", f"is {kind(headers)}, not a mapping")
    out: list[tuple[str, str]] = []
    for name, item in headers.items():
        key = f"{where}.headers.{name}"
        if not isinstance(name, str) or name not in _HEADERS:
            source.fail(key, f"cannot be set (only {', '.join(_HEADERS)})")
        text = source.string(item, key) if item is not None else ""
        bad = UNPRINTABLE.search(text)
        if bad:
            source.fail(
                key,
                f"holds {bad.group()!r} (U+{ord(bad.group()):04X}): a header value must be "
                "printable ASCII",
            )
        allowed = _HEADERS[name]
        if text and allowed is not None and text not in allowed:
            source.fail(key, f"{text!r} is not one of {', '.join(allowed)}")
        if text:  # blank: unset, as the toolkit documents
            out.append((name, text))
    return tuple(out)
