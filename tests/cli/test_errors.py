"""Every command's bad input as the README promises it: exit status 2, one message naming
the flag, URL, variable or file key to fix, and nothing unrelated logged before it.

The commands run as a user runs them (a process of their own, a real HTTP server, a real
port taken) where what is on stderr matters; in-process where only the status and the
message do.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from podres_exporter.cli import main
from podres_exporter.core.errors import ConfigError
from podres_exporter.exporter.settings import build
from tests.support import http_server, run_in_group

PODRES = [sys.executable, "-m", "podres_exporter"]


def podres(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``podres ARGS`` in a process of its own, off a terminal, with no PODRES_* variables
    but those of ``env``; its exit status and stderr."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PODRES_")}
    proc = run_in_group(
        [*PODRES, *args], timeout=60, env={**base, **(env or {})}, stdin=subprocess.DEVNULL
    )
    return proc.returncode, proc.stderr


def one_line(err: str, *needles: str) -> str:
    """stderr is one line, no traceback, holding every needle; that line."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], err
    return lines[0]


class _NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"404 page not found\n"
        self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads the command's stderr, not the server's."""


@pytest.fixture
def not_found_url() -> Iterator[str]:
    """A real HTTP server on the loopback that answers 404 to every path."""
    with http_server(_NotFound) as port:
        yield f"http://127.0.0.1:{port}"


def test_top_exporter_url_whose_path_is_not_there_exits_2(not_found_url: str) -> None:
    """`podres top --exporter URL/nothere` answered 404: exit 2, one line naming the flag."""
    rc, err = podres("top", "--once", "--exporter", f"{not_found_url}/nothere")
    assert rc == 2, err
    one_line(err, "podres top: error:", "(--exporter)", "HTTP 404", "path")


def test_snapshot_without_socket_says_it_once_and_exits_2(tmp_path: Path) -> None:
    """`podres snapshot` without a socket: exit 2, one line, the flag named once, nothing
    logged before it (no NVML, no telemetry source)."""
    rc, err = podres("snapshot", "--kubelet-socket", str(tmp_path / "none.sock"))
    assert rc == 2, err
    line = one_line(err, "podres snapshot: error:", "none.sock")
    assert line.count("--kubelet-socket") == 1, line


def test_export_on_a_taken_port_logs_nothing_before_its_error() -> None:
    """`podres export` on a port already taken: one line naming --listen-address, logged
    before nothing (the port is bound before NVML and the sources open)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        rc, err = podres("export", "--listen-address", f"127.0.0.1:{port}", "--log-format", "json")
    assert rc == 2, err
    one_line(err, "podres export: error:", "--listen-address")


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["export", "--poll-intervall", "5s"], "--poll-interval"),
        (["export", "--no-collector.gpus"], "--no-collector.gpu"),
        (["demo", "--scenaro", "demo"], "--scenario"),
        (["snapshot", "--kubelet-sockets=/x"], "--kubelet-socket"),
        (["plugin", "--device-plugin-dirs", "/x"], "--device-plugin-dir"),
        (["top", "--exportr", "http://x"], "--exporter"),
    ],
)
def test_an_unknown_flag_gets_its_commands_usage_and_a_suggestion(
    argv: list[str], meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown flag of a subcommand: exit 2, that subcommand's usage, "did you mean"."""
    with pytest.raises(SystemExit) as info:
        main(argv, {})
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: podres {argv[0]} "), err
    assert f"podres {argv[0]}: error: unrecognized arguments: {argv[1]}" in err
    assert f"(did you mean {meant}?)" in err


def test_a_word_like_no_flag_gets_no_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    """A flag like none of the command's: the usage and the error, no guess."""
    with pytest.raises(SystemExit):
        main(["export", "--zzzzzz"], {})
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzzzzz" in err and "did you mean" not in err


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "podres.toml"
    path.write_text(text)
    return str(path)


def test_an_unknown_config_key_gets_a_suggestion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown key close to a known one: exit 2, the key and "did you mean", not the list
    of every key."""
    path = write(tmp_path, 'poll-intervall = "5s"\n')
    assert main(["export", "--config", path], {}) == 2
    line = one_line(capsys.readouterr().err, "'poll-intervall'", "(did you mean poll-interval?)")
    assert "known:" not in line


def test_an_unknown_resource_file_key_gets_a_suggestion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plugin's resource file: an unknown key close to a known one gets a suggestion."""
    path = write(tmp_path, '[[resource]]\nname = "example.com/dev"\nreplica = 2\n')
    assert main(["plugin", "--resources", path, "--listen-address", "127.0.0.1:0"], {}) == 2
    one_line(capsys.readouterr().err, "resource[0].replica", "(did you mean replicas?)")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("15", ['poll-interval = "15s"', "the number 15"]),
        ("15.5", ['poll-interval = "15.5s"', "the number 15.5"]),
        ("true", ['poll-interval = "10s"', "a boolean"]),
        ('"15 s"', ["'15 s' is not a duration"]),
    ],
)
def test_a_duration_in_the_config_file_is_a_string_with_its_unit(
    tmp_path: Path, value: str, words: list[str]
) -> None:
    """`poll-interval = 15` or `"15 s"` in the config file: refused, naming the key, with
    the form to write."""
    path = write(tmp_path, f"poll-interval = {value}\n")
    with pytest.raises(ConfigError) as info:
        build({}, {}, config_path=path)
    assert "--poll-interval (from key 'poll-interval' of config file" in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_the_documented_duration_forms_are_taken(tmp_path: Path) -> None:
    """A duration string with its unit in the file; with or without one on a flag."""
    assert (
        build({}, {}, config_path=write(tmp_path, 'poll-interval = "15s"\n')).poll_interval_s == 15
    )
    assert build({"--poll-interval": "2.5"}, {}).poll_interval_s == 2.5
    assert build({"--poll-interval": "500ms"}, {}).poll_interval_s == 0.5


def test_the_plugin_refuses_config_naming_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`podres plugin --config FILE`: exit 2, one line naming --resources (--config is
    podres export's settings file in every command)."""
    path = write(tmp_path, '[[resource]]\nname = "example.com/dev"\n')
    assert main(["plugin", "--config", path], {}) == 2
    one_line(capsys.readouterr().err, "podres plugin: error: --config", "--resources FILE")


def test_the_plugin_refuses_podres_config_naming_podres_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PODRES_CONFIG alone for the plugin: exit 2, one line naming PODRES_RESOURCES."""
    path = write(tmp_path, '[[resource]]\nname = "example.com/dev"\n')
    assert main(["plugin"], {"PODRES_CONFIG": path}) == 2
    one_line(capsys.readouterr().err, "PODRES_CONFIG", "PODRES_RESOURCES")


def test_the_plugin_help_shows_resources_not_config(capsys: pytest.CaptureFixture[str]) -> None:
    """The plugin's help names its resource file --resources and has no --config."""
    with pytest.raises(SystemExit):
        main(["plugin", "--help"], {})
    out = capsys.readouterr().out
    assert "--resources FILE" in out and "PODRES_RESOURCES" in out
    assert "--config" not in out
