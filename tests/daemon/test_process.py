"""The process shell: stop signals, logging set-up in every command, the listen error."""

from __future__ import annotations

import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from podres_exporter.cli import main as podres
from podres_exporter.core.errors import ConfigError
from podres_exporter.daemon import logconf, process
from podres_exporter.daemon.web import Index, Site
from podres_sim.__main__ import main as sim_main

Handler = Callable[[int, FrameType | None], None]


@pytest.fixture
def sentinels() -> Iterator[dict[signal.Signals, Handler]]:
    """Harmless SIGTERM / SIGINT / SIGHUP handlers for the test's duration (a signal that
    the code under test fails to catch lands here, not in pytest); the originals restored
    after."""

    def ignore(_signum: int, _frame: FrameType | None) -> None:
        return

    watched = (*process.STOP_SIGNALS, process.RELOAD_SIGNAL)
    handlers: dict[signal.Signals, Handler] = {sig: ignore for sig in watched}
    previous = {sig: signal.signal(sig, h) for sig, h in handlers.items()}
    yield handlers
    for sig, h in previous.items():
        signal.signal(sig, h)


def kill_self_soon(sig: signal.Signals) -> threading.Timer:
    timer = threading.Timer(0.1, os.kill, (os.getpid(), sig))
    timer.start()
    return timer


# ------------------------------------------------------------------------------ signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_stop_signal_ends_the_wait_and_names_itself(
    sig: signal.Signals, sentinels: dict[signal.Signals, Handler]
) -> None:
    """SIGTERM / SIGINT end the wait with "signal NAME"; the previous handlers come back."""
    with process.stop_on_signals() as stop:
        assert signal.getsignal(sig) is not sentinels[sig]
        timer = kill_self_soon(sig)
        reason = stop.wait()
    timer.join()
    assert reason == f"signal {sig.name}"
    assert stop.event.is_set()
    for s, h in sentinels.items():
        assert signal.getsignal(s) is h


def test_a_signal_wakes_the_wait_without_its_polling(
    sentinels: dict[signal.Signals, Handler],
) -> None:
    """The wait sleeps until a signal comes, not by looking every so often: with the
    event looked at only hourly, a SIGHUP still runs the reloads at once and a SIGTERM
    after it still ends the wait (else the test's timeout ends the test)."""
    timers: list[threading.Timer] = []

    def reload() -> None:  # then a SIGTERM, once the wait is back to sleep
        timers.append(kill_self_soon(signal.SIGTERM))

    hourly = threading.Event()
    with process.stop_on_signals(hourly, reload=[reload], event_poll_s=3600.0) as stop:
        timers.append(kill_self_soon(signal.SIGHUP))
        reason = stop.wait()
    for t in timers:
        t.join()
    assert reason == "signal SIGTERM"
    assert len(timers) == 2, "the SIGHUP ran the reload"


def test_without_an_event_the_wait_never_wakes_by_itself(
    monkeypatch: pytest.MonkeyPatch, sentinels: dict[signal.Signals, Handler]
) -> None:
    """Given no event (the exporter), the wait polls its pipe with no timeout: an idle
    daemon's main thread sleeps until a signal. Given one, it looks at it every
    EVENT_POLL_S."""
    timeouts: list[float | None] = []
    real_poll = select.poll

    class Recording:
        def __init__(self) -> None:
            self._poll = real_poll()

        def register(self, fd: int, mask: int) -> None:
            self._poll.register(fd, mask)

        def poll(self, timeout: float | None = None) -> list[tuple[int, int]]:
            timeouts.append(timeout)
            return self._poll.poll(timeout)

    monkeypatch.setattr(select, "poll", Recording)
    with process.stop_on_signals() as stop:
        timer = kill_self_soon(signal.SIGTERM)
        assert stop.wait() == "signal SIGTERM"
    timer.join()
    assert timeouts and set(timeouts) == {None}
    timeouts.clear()
    event = threading.Event()
    threading.Timer(0.1, event.set).start()
    with process.stop_on_signals(event) as stop:
        assert stop.wait() == "stop requested"
    assert timeouts and set(timeouts) == {process.EVENT_POLL_S * 1000}


def test_a_signal_delivered_to_another_thread_wakes_the_wait(
    sentinels: dict[signal.Signals, Handler],
) -> None:
    """With SIGTERM blocked on the main thread the kernel delivers it to another one; the
    interpreter's handler there writes to the wake-up fd, and the wait, which has no
    timeout, ends (else the test's timeout ends the test)."""
    go = threading.Event()

    def kill_when_told() -> None:  # started before the block, so SIGTERM is open here
        go.wait(10)
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=kill_when_told)
    killer.start()
    with process.stop_on_signals() as stop:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            go.set()
            assert stop.wait() == "signal SIGTERM"
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    killer.join()


def test_the_event_ends_the_wait_too(sentinels: dict[signal.Signals, Handler]) -> None:
    """A given event, set from another thread, ends the wait: "stop requested"."""
    event = threading.Event()
    threading.Timer(0.1, event.set).start()
    with process.stop_on_signals(event) as stop:
        assert stop.wait() == "stop requested"
    assert signal.getsignal(signal.SIGINT) is sentinels[signal.SIGINT]


def test_off_the_main_thread_no_handler_is_installed(
    sentinels: dict[signal.Signals, Handler],
) -> None:
    """In another thread the handlers stay as they are; only the event stops the wait."""
    event = threading.Event()
    seen: list[Any] = []

    def waiter() -> None:
        with process.stop_on_signals(event) as stop:
            seen.append(signal.getsignal(signal.SIGTERM))
            seen.append(stop.wait())

    thread = threading.Thread(target=waiter)
    thread.start()
    event.set()
    thread.join(timeout=5)
    assert seen == [sentinels[signal.SIGTERM], "stop requested"]


def test_sighup_runs_the_reloads_on_the_waiting_thread(
    sentinels: dict[signal.Signals, Handler],
) -> None:
    """SIGHUP does not end the wait: it logs one reload_requested and runs every reload
    callback on the waiting thread; one that raises is logged and the next still runs."""
    ran: list[tuple[str, threading.Thread]] = []

    def first() -> None:
        ran.append(("first", threading.current_thread()))

    def broken() -> None:
        raise OSError("cannot read /etc/podres/web.yml")

    with capture_logs() as logs, process.stop_on_signals(reload=[first, broken]) as stop:
        assert signal.getsignal(signal.SIGHUP) is not sentinels[signal.SIGHUP]

        def last() -> None:
            ran.append(("last", threading.current_thread()))
            stop.event.set()

        stop.reloads.append(last)
        timer = kill_self_soon(signal.SIGHUP)
        reason = stop.wait()
    timer.join()
    assert reason == "stop requested", "the last callback stopped it, not the signal"
    assert ran == [("first", threading.main_thread()), ("last", threading.main_thread())]
    events = [e["event"] for e in logs]
    assert events == ["reload_requested", "reload_failed"]
    assert logs[0]["callbacks"] == 3 and logs[0]["signal"] == "SIGHUP"
    assert "cannot read" in logs[1]["error"] and "broken" in logs[1]["callback"]
    assert signal.getsignal(signal.SIGHUP) is sentinels[signal.SIGHUP]


def test_sighup_without_callbacks_only_logs(sentinels: dict[signal.Signals, Handler]) -> None:
    """No reload registered: SIGHUP still never ends the process; it is logged once, then
    a SIGTERM stops the wait."""
    with capture_logs() as logs, process.stop_on_signals() as stop:
        os.kill(os.getpid(), signal.SIGHUP)  # its handler runs here, in this thread
        timer = kill_self_soon(signal.SIGTERM)
        reason = stop.wait()
    timer.join()
    assert reason == "signal SIGTERM"
    assert logs == [
        {"event": "reload_requested", "signal": "SIGHUP", "signals": 1, "callbacks": 0,
         "log_level": "info"}
    ]  # fmt: skip


def test_leaving_never_gives_sighup_its_default_action_back(
    sentinels: dict[signal.Signals, Handler],
) -> None:
    """Where SIGHUP had its default action (which ends the process), leaving the wait
    ignores it instead: a SIGHUP during the daemon's shutdown ends nothing. The stop
    signals get their handlers back as they were."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    with process.stop_on_signals() as stop:
        timer = kill_self_soon(signal.SIGTERM)
        stop.wait()
    timer.join()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGHUP)  # ignored: the test goes on
    for sig in process.STOP_SIGNALS:
        assert signal.getsignal(sig) is sentinels[sig]


def test_ignore_hangup_ignores_it_until_a_wait_catches_it(
    sentinels: dict[signal.Signals, Handler],
) -> None:
    """ignore_hangup (a daemon command's first step): SIGHUP ignored before the wait, a
    reload inside it, ignored again after it; off the main thread it changes nothing."""
    process.ignore_hangup()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    with process.stop_on_signals() as stop:
        assert signal.getsignal(signal.SIGHUP) not in (signal.SIG_IGN, signal.SIG_DFL)
        stop.event.set()
        stop.wait()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    signal.signal(signal.SIGHUP, sentinels[signal.SIGHUP])
    worker = threading.Thread(target=process.ignore_hangup)
    worker.start()
    worker.join()
    assert signal.getsignal(signal.SIGHUP) is sentinels[signal.SIGHUP]


class Daemon:
    """A command run as a process whose stderr (not a terminal) is read as it comes."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.events: list[dict[str, Any]] = []

    def wait_event(self, name: str) -> dict[str, Any]:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            event: dict[str, Any] = json.loads(line)  # auto, on a pipe: JSON lines
            self.events.append(event)
            if event["event"] == name:
                return event
        pytest.fail(f"no {name} event before the end; got {self.events}")

    def stop(self, sig: signal.Signals, event: str) -> dict[str, Any]:
        self.proc.send_signal(sig)
        found = self.wait_event(event)
        assert self.proc.wait(timeout=10) == 0
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_daemons_stop_on_a_signal_naming_it(tmp_path: Path, sig: signal.Signals) -> None:
    """`podres export` and the simulator log JSON on a pipe (format auto) and stop on
    SIGTERM / SIGINT with exit status 0, logging which signal it was."""
    daemons = {
        "exporter_stopped": Daemon(
            [
                "-m", "podres_exporter", "export", "--listen-address", "127.0.0.1:0",
                "--kubelet-socket", str(tmp_path / "none.sock"), "--no-collector.gpu",
            ]
        ),
        "sim_exit": Daemon(
            [
                "-m", "podres_sim", "--scenario", "minimal",
                "--socket", str(tmp_path / "k.sock"), "--churn-interval", "0",
            ]
        ),
    }  # fmt: skip
    try:
        daemons["exporter_stopped"].wait_event("exporter_started")
        daemons["sim_exit"].wait_event("sim_serving")
        for last, daemon in daemons.items():
            assert daemon.stop(sig, last)["reason"] == f"signal {sig.name}"
    finally:
        for daemon in daemons.values():
            if daemon.proc.poll() is None:
                daemon.proc.kill()
                daemon.proc.wait()
            if daemon.proc.stderr is not None:
                daemon.proc.stderr.close()


# ------------------------------------------------------------------------------ logging


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def last_line_is_json(out: io.StringIO) -> bool:
    structlog.get_logger("probe").warning("probe", n=1)
    line = out.getvalue().splitlines()[-1]
    try:
        return bool(json.loads(line)["event"] == "probe")
    except ValueError:
        assert "probe" in line
        return False


@pytest.mark.parametrize(
    ("log_format", "terminal", "as_json"),
    [
        ("auto", False, True),
        ("auto", True, False),
        ("json", True, True),
        ("console", False, False),
    ],
)
def test_configure_logging_formats(log_format: str, terminal: bool, as_json: bool) -> None:
    """auto: JSON unless the stream is a terminal; json and console regardless."""
    out = Terminal() if terminal else io.StringIO()
    process.configure_logging("info", log_format, stream=out)
    assert last_line_is_json(out) is as_json


def taken_port() -> tuple[socket.socket, int]:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder, int(holder.getsockname()[1])


PLUGIN_CONFIG = """
[[resource]]
name = "intel.com/sriov_vf"
[resource.discover]
kind = "pci"
device = "0x1889"
"""


def run_command(name: str, tmp_path: Path, log_format: str, port: int) -> int:
    """Run a command in-process up to an early, expected failure after its logging set-up."""
    fmt = ["--log-format", log_format]
    if name == "export":
        listen = ["--listen-address", f"127.0.0.1:{port}", "--no-collector.gpu"]
        return podres(["export", *listen, *fmt], {})
    if name == "demo":
        return podres(["demo", "--scenario", str(tmp_path / "none.toml"), *fmt], {})
    if name == "snapshot":
        sock = ["--kubelet-socket", str(tmp_path / "none.sock"), "--kubelet-timeout", "1s"]
        return podres(
            ["snapshot", *sock, "--path.sysfs", str(tmp_path), "--no-telemetry", *fmt], {}
        )
    if name == "plugin":
        (tmp_path / "plugin.toml").write_text(PLUGIN_CONFIG)
        args = ["--resources", str(tmp_path / "plugin.toml"), "--device-plugin-dir", str(tmp_path)]
        return podres(["plugin", *args, "--listen-address", f"127.0.0.1:{port}", *fmt], {})
    assert name == "sim"
    return sim_main(["--socket", str(tmp_path / "k.sock"), "--scenario", "synthetic:x", *fmt])


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
@pytest.mark.parametrize("command", ["export", "demo", "snapshot", "plugin", "sim"])
def test_auto_means_the_same_in_every_command(
    command: str,
    terminal: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--log-format auto: JSON on a pipe, console on a terminal, in every command; each
    sets logging up once."""
    out = Terminal() if terminal else io.StringIO()
    real = logconf.configure
    calls: list[bool | None] = []

    def on_this_stream(level: str, *, stream: Any = None, json: bool | None = None) -> None:
        calls.append(json)
        real(level, stream=out, json=json)

    monkeypatch.setattr(logconf, "configure", on_this_stream)
    holder, port = taken_port()
    with holder:
        assert run_command(command, tmp_path, "auto", port) in (1, 2)
    capsys.readouterr()
    assert calls == [None]
    assert last_line_is_json(out) is not terminal


# --------------------------------------------------------------------------- listening


def site() -> Site:
    return Site(
        metrics=lambda *, openmetrics, gz: b"",
        health=lambda: (True, "ok"),
        readiness=lambda: (True, "ok"),
        index=Index("t", "0", "s", "h", "r"),
    )


def test_a_taken_port_is_a_config_error_naming_the_flag() -> None:
    """listen: OSError becomes the ConfigError naming --listen-address and the address."""
    holder, port = taken_port()
    with holder, pytest.raises(ConfigError) as err:
        process.listen(("127.0.0.1", port), site())
    assert str(err.value).startswith(f"cannot listen on 127.0.0.1:{port} (--listen-address): ")
    assert "in use" in str(err.value)


def test_an_ipv6_address_is_shown_bracketed() -> None:
    """An address the machine does not have, IPv6: named as the flag takes it."""
    with pytest.raises(
        ConfigError, match=r"cannot listen on \[fd00::dead\]:9 \(--listen-address\)"
    ):
        process.listen(("fd00::dead", 9), site())


def test_listen_binds_without_serving() -> None:
    """listen: bound, not serving until started."""
    server = process.listen(("127.0.0.1", 0), site())
    try:
        assert server.port > 0
    finally:
        server.stop()


@pytest.mark.timeout(10)  # a handler that takes the lock hangs here
def test_the_signal_handler_takes_no_lock() -> None:
    """A signal can interrupt the main thread while it holds the stop event's lock (for a
    moment in every Event.wait): the handler must not need that lock, or it deadlocks."""
    with process.stop_on_signals() as stop:
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        with stop.event._cond:  # type: ignore[attr-defined]  # what Event.wait holds
            handler(signal.SIGTERM, None)  # returns: it only records the signal
        assert stop.wait() == "signal SIGTERM"
        assert stop.event.is_set()


def test_a_daemon_tunes_its_garbage_collector_before_it_starts() -> None:
    """``process.tune_gc`` (which ``podres plugin`` and ``podres export``, below, call)
    freezes what start-up made and collects young objects every GC_THRESHOLDS[0]
    allocations, not Python's 700."""
    code = (
        "import gc, sys\n"
        "from podres_exporter.daemon import process\n"
        "assert gc.get_threshold()[0] == 700 and gc.get_freeze_count() == 0\n"
        "process.tune_gc()\n"
        "print(gc.get_threshold()[0], gc.get_freeze_count() > 1000)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == [str(process.GC_THRESHOLDS[0]), "True"]


def test_podres_export_tunes_its_interpreter_before_it_serves(tmp_path: Path) -> None:
    """The running ``podres export`` (no kubelet: it serves and retries) has the garbage
    collector's thresholds and the switch interval it sets, where Python's were 700 and
    5 ms: a scrape during a poll waits for the poll's threads a fifth of a millisecond at
    a time."""
    code = (
        "import gc, os, signal, sys, threading\n"
        "from podres_exporter import cli\n"
        "print(gc.get_threshold()[0], sys.getswitchinterval(), flush=True)\n"
        "def seen():\n"
        "    print(gc.get_threshold()[0], sys.getswitchinterval(), flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "threading.Timer(1.0, seen).start()\n"
        "sys.exit(cli.main(['export', '--listen-address', '127.0.0.1:0',\n"
        f"    '--kubelet-socket', {str(tmp_path / 'absent.sock')!r}]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    before, running = (line.split() for line in out.stdout.splitlines())
    assert before == ["700", "0.005"]
    assert int(running[0]) == process.GC_THRESHOLDS[0]
    assert float(running[1]) == pytest.approx(process.SWITCH_INTERVAL_S)  # kept in µs
