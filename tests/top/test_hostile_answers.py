"""`podres top` against hostile peers and bad URLs: one message naming the URL, the
documented exit status, never a traceback; a total deadline and a size cap on every
answer, whatever pace and size the peer picks.

Each case runs the real program in a process of its own against a real TCP server
(:mod:`tests.top.hostile_server`) that answers what a broken or malicious exporter or
Prometheus might.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from podres_exporter.top.rows import Sample
from tests.support import free_port, run_in_group
from tests.top import hostile_server as hs
from tests.top.samples import DEVICES, GPUS, NODE

TOP = [sys.executable, "-m", "podres_exporter.top"]
OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"


def top(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    """`podres top --once ARGS` off a terminal, with no PODRES_* variables; its status,
    stdout and stderr. The run (and anything it started) is killed if it outlives
    ``timeout``, which fails the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODRES_")}
    proc = run_in_group([*TOP, "--once", *args], timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout, proc.stderr


def assert_one_message(err: str, *needles: str) -> None:
    """stderr is one ``podres top: error:`` line holding every needle, and no traceback."""
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("podres top: error: "), err
    for needle in needles:
        assert needle in lines[0], err


def exposition(value_of: dict[str, float]) -> bytes:
    """Our sample node as Prometheus text, each metric's value replaced where
    ``value_of`` names it."""
    samples: tuple[Sample, ...] = (*NODE, *GPUS, *DEVICES)
    lines = []
    for s in samples:
        labels = ",".join(f'{k}="{v}"' for k, v in s.labels.items())
        value = value_of.get(s.name, s.value)
        lines.append(f"{s.name}{{{labels}}} {value!r}".replace("nan", "NaN").replace("inf", "Inf"))
    return ("\n".join(lines) + "\n").encode()


# (answer, extra flags, exit status, words in the message). A trickle's head comes at once:
# a --timeout of seconds is past it on a busy machine too, so the answer has begun.
EXPORTER_CASES = {
    "bad-status-line": (hs.raw(b"HELLO THERE\r\n\r\n"), [], 1, "no valid HTTP"),
    "binary-garbage": (hs.raw(b"\x00\xff\x1b[2J" * 64), [], 1, "no valid HTTP"),
    "closed-without-answer": (hs.raw(b""), [], 1, "no valid HTTP"),
    "over-100-headers": (
        hs.raw(OK_HEAD + b"X-A: b\r\n" * 101 + b"\r\n"),
        [],
        1,
        "more than 100 headers",
    ),
    "64KiB-header-line": (
        hs.raw(OK_HEAD + b"X-A: " + b"a" * 70000 + b"\r\n\r\n"),
        [],
        1,
        "no valid HTTP",
    ),
    "short-body": (
        hs.raw(OK_HEAD + b"Content-Length: 1000\r\n\r\npodres_pods 1\n"),
        [],
        1,
        "short body",
    ),
    "bad-chunks": (
        hs.raw(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n"),
        [],
        1,
        "no valid HTTP",
    ),
    "2GB-declared": (
        hs.raw(OK_HEAD + b"Content-Length: 2147483648\r\n\r\npodres_pods 1\n"),
        [],
        1,
        "--max-answer-size",
    ),
    "endless-body": (
        hs.endless(OK_HEAD + b"\r\n", b"podres_pods 1\n" * 4096),
        ["--max-answer-size", "1Mi"],
        1,
        "more than 1048576 bytes (--max-answer-size)",
    ),
    "trickled-head": (
        hs.trickle(b"HTTP/1.1 200 OK\r\nX-Slow: ", every_s=0.2),
        ["--timeout", "3s"],
        1,
        "did not finish its answer within 3 s (--timeout)",
    ),
    "trickled-body": (
        hs.trickle(OK_HEAD + b"Content-Length: 100000\r\n\r\n", every_s=0.2),
        ["--timeout", "3s"],
        1,
        "did not finish its answer within 3 s (--timeout)",
    ),
    "silent": (hs.trickle(b"", every_s=3600), ["--timeout", "1s"], 2, "no answer within"),
    "server-error": (
        hs.raw(b"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\n\r\nboom!"),
        [],
        1,
        "answered HTTP 500",
    ),
    "not-utf8": (hs.http_200(b'podres_pods{a="\xff"} 1\n'), [], 1, "no Prometheus text"),
}


@pytest.mark.parametrize(
    ("answer", "flags", "status", "words"),
    list(EXPORTER_CASES.values()),
    ids=list(EXPORTER_CASES),
)
def test_a_hostile_exporter_ends_in_one_message(
    answer: hs.Answer, flags: list[str], status: int, words: str
) -> None:
    """A broken, slow or endless exporter answer: the documented status, one message naming
    the URL, no traceback; a trickle ends at --timeout, an endless body at
    --max-answer-size."""
    with hs.serving(answer) as server:
        url = hs.url_of(server)
        rc, _, err = top("--exporter", url, *flags)
    assert rc == status, err
    assert_one_message(err, url, words)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_an_exporter_serving_non_finite_values_is_shown_without_them(bad: float) -> None:
    """NaN and ±Inf values are no figure: top shows the node without them."""
    hostile = {
        name: bad
        for name in {s.name for s in (*NODE, *GPUS, *DEVICES)}
        if name not in ("podres_kubelet_up", "podres_pods", "podres_containers")
    }
    with hs.serving(hs.http_200(exposition(hostile))) as server:
        rc, out, err = top("--exporter", hs.url_of(server), "-o", "wide")
    assert rc == 0, err
    assert "Traceback" not in err and out.strip()


def _vector(*values: object, metric: object = None) -> bytes:
    """A Prometheus instant-query answer with one result per value."""
    labels = {"node": "node-a"} if metric is None else metric
    result = [{"metric": labels, "value": [100.0, v]} for v in values]
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    ).encode()


PROMETHEUS_CASES = {
    "deeply-nested": b"[" * 200_000 + b"]" * 200_000,
    "a-list": b"[]",
    "a-string": b'"success"',
    "data-a-list": b'{"status": "success", "data": []}',
    "result-a-dict": b'{"status": "success", "data": {"result": {}}}',
    "result-items-numbers": b'{"status": "success", "data": {"result": [1, 2]}}',
    "metric-a-string": _vector("1", metric="node-a"),
    "label-a-list": _vector("1", metric={"node": ["a"]}),
    "value-a-number": _vector(1),
    "value-not-a-number": _vector("many"),
    "value-missing": b'{"status": "success", "data": {"result": [{"metric": {}}]}}',
    "value-short": b'{"status": "success", "data": {"result": [{"metric": {}, "value": [1]}]}}',
    "not-json": b"<html>hello</html>",
}


@pytest.mark.parametrize("body", list(PROMETHEUS_CASES.values()), ids=list(PROMETHEUS_CASES))
def test_hostile_prometheus_json_ends_in_one_message(body: bytes) -> None:
    """JSON nested too deep, of another shape or wrongly typed: exit 1, one message naming
    the URL, no traceback."""
    with hs.serving(hs.http_200(body, "application/json")) as server:
        url = hs.url_of(server)
        rc, _, err = top("--prometheus", url)
    assert rc == 1, err
    assert_one_message(err, url, "(--prometheus)")


def test_prometheus_non_finite_values_are_left_out() -> None:
    """NaN and ±Inf in a query's answer are left out; the finite values are shown."""
    body = _vector("1", "NaN", "+Inf", "-Inf")
    with hs.serving(hs.http_200(body, "application/json")) as server:
        rc, out, err = top("--prometheus", hs.url_of(server), "-o", "json")
    assert rc == 0, err
    assert "Traceback" not in err
    assert json.loads(out)  # strict JSON: no NaN or Infinity in it


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://[::1", "http://[::1"),
        ("not a url", "not a url"),
        ("http://host:99999", "host:99999"),
        ("http://host:port", "host:port"),
        ("http:///metrics", "http:///metrics"),
        ("http://ho st:9842", "ho st"),
        ("https://admin:s3cret@[::1", "admin:***@"),
    ],
)
@pytest.mark.parametrize("flag", ["--exporter", "--prometheus"])
def test_a_malformed_url_exits_2_naming_the_flag(flag: str, url: str, shown: str) -> None:
    """A URL that is none: exit 2, one message naming the flag and the URL (no password)."""
    rc, _, err = top(flag, url)
    assert rc == 2, err
    assert_one_message(err, flag, shown)
    assert "s3cret" not in err


@pytest.mark.parametrize("flag", ["--exporter", "--prometheus"])
def test_a_password_in_the_url_is_never_printed(flag: str) -> None:
    """user:password@ in a URL that cannot be reached: the message names the URL without
    the password."""
    rc, _, err = top(flag, f"http://admin:s3cret@127.0.0.1:{free_port()}")
    assert rc == 2, err
    assert_one_message(err, "127.0.0.1", flag)
    assert "s3cret" not in err


def test_credentials_refused_exit_2_naming_the_flags(tmp_path: Path) -> None:
    """401 from the peer: exit 2 naming how to give credentials; the password sent from
    --auth-password-file is never printed."""
    answer = hs.raw(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 12\r\n\r\nUnauthorized")
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    with hs.serving(answer) as server:
        rc, _, err = top(
            "--exporter", hs.url_of(server), "--auth-user", "admin",
            "--auth-password-file", str(password),
        )  # fmt: skip
        heads = list(server.heads)
    assert rc == 2, err
    assert_one_message(err, "HTTP 401", "--auth-user")
    assert "s3cret" not in err
    assert b"Authorization: Basic YWRtaW46czNjcmV0\r\n" in heads[0]  # admin:s3cret
