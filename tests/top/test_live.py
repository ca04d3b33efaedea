"""Live mode in a real pseudo-terminal (tmux): keys change the frame; quitting restores the tty.

The pure key handling is tested first; then `podres top` runs in tmux panes, driven with
`send-keys` and read with `capture-pane`.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podres_exporter.cli.export import Exporter
from podres_exporter.top.live import State, handle_key, split_keys
from podres_exporter.top.selection import Options
from podres_sim import SimKubelet
from tests.support import http_get, wait_until

REPO = Path(__file__).resolve().parents[2]
# `stty -a` prints a flag that is off with a leading minus.
ICANON_ON = re.compile(r"(?<![-\w])icanon\b")
ECHO_ON = re.compile(r"(?<![-\w])echo\b")


def press(state: State, text: str) -> State:
    for key in split_keys(text):
        state = handle_key(state, key)
    return state


def test_keys_change_view_sort_filters_and_quit() -> None:
    """v switches view, s/S cycle the sort, I inverts, n/p/r type filters, c clears, q quits."""
    s = State(Options())
    assert press(s, "v").options.view == "devices"
    assert press(s, "vv").options.view == "containers"
    assert press(s, "s").options.sort_key == "cpus"
    assert press(s, "ss").options.sort_key == "busy"
    assert press(s, "S").options.sort_key == "owner"
    assert press(s, "SS").options.sort_key == "memory"
    assert press(s, "vs").options.sort_key == "id", "the devices view has its own columns"
    assert press(s, "I").options.reverse
    typed = press(s, "nml-x\x7ftraining")
    assert typed.editing == "namespace" and typed.typed == "ml-training"
    applied = press(typed, "\r")
    assert applied.options.namespace == "ml-training" and applied.editing is None
    assert press(applied, "pvllm\x1b").options.pod == "", "Esc cancels"
    assert press(applied, "rgpu\r").options.resource == "gpu"
    assert press(applied, "n\x15\r").options.namespace == "", "an empty filter clears it"
    assert press(applied, "c").options.filters() == ()
    assert press(s, "w").options.wide
    assert press(s, "jj\x1b[B").offset == 3 and press(s, "jk\x1b[A").offset == 0
    assert press(s, "\x1b[6~").offset == 10 and press(s, "Gg").offset == 0
    assert press(s, "q").quit and press(s, "\x03").quit
    assert not press(s, "z").quit and press(s, " ").refresh
    assert press(typed, "q").typed == "ml-trainingq", "keys are text while a filter is typed"


def test_split_keys_names_escape_sequences() -> None:
    """Arrow and page keys arrive as escape sequences and become names; a lone Esc too."""
    assert split_keys("a\x1b[Ab\x1b[6~\x1b") == ["a", "up", "b", "pgdn", "esc"]
    assert split_keys("\x1b[1;5Cx") == ["esc", "x"], "an unknown sequence is skipped"


class Tmux:
    """A private tmux server; every session is killed at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.socket = str(tmp / "tmux.sock")  # private: never the user's tmux server
        self.tmp = tmp

    def __call__(self, *args: str) -> str:
        proc = subprocess.run(
            ["tmux", "-S", self.socket, *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        return proc.stdout

    def start(self, session: str, argv: list[str]) -> None:
        """Run ``argv`` in a 160x50 pane, then print its exit status and the tty's modes."""
        script = self.tmp / f"{session}.sh"
        # Ctrl-C reaches the whole foreground group: the shell runs a trap (reset to the
        # default in its child) instead of dying, so the checks after the command still run.
        lines = [
            "trap : INT",
            f"cd {shlex.quote(str(REPO))}",
            shlex.join(argv),
            'echo "EXIT=$?"',
            "stty -a",
            "sleep 120",
        ]
        script.write_text("\n".join(lines) + "\n")
        self("new-session", "-d", "-x", "160", "-y", "50", "-s", session, f"sh {script}")

    def screen(self, session: str) -> str:
        return self("capture-pane", "-p", "-J", "-t", f"{session}:")

    def wait_for(self, session: str, predicate: Callable[[str], bool], timeout: float = 15) -> str:
        """The pane's text once ``predicate`` holds for it."""
        seen = [""]

        def check() -> bool:
            seen[0] = self.screen(session)
            return predicate(seen[0])

        wait_until(check, timeout)
        return seen[0]

    def keys(self, session: str, *keys: str, literal: bool = False) -> None:
        self("send-keys", "-t", f"{session}:", *(["-l"] if literal else []), *keys)

    def kill(self) -> None:
        subprocess.run(
            ["tmux", "-S", self.socket, "kill-server"], capture_output=True, check=False, timeout=10
        )


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    assert shutil.which("tmux"), "install the Debian package tmux"
    server = Tmux(tmp_path)
    try:
        yield server
    finally:
        server.kill()


def table_rows(screen: str, header: str) -> list[str]:
    lines = screen.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.startswith(("rows ", "* ", "+ ", "q quit")):
            break
        rows.append(line)
    return rows


def test_live_mode_in_a_terminal(
    make_sim: Callable[..., SimKubelet], make_exporter: Callable[..., Exporter], tmux: Tmux
) -> None:
    """Start, sort, filter, switch view, quit with q and with Ctrl-C: exit 0, tty restored."""
    exp = make_exporter(make_sim("demo"))
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    argv = [sys.executable, "-m", "podres_exporter.top", "--exporter", exp.url, "--interval", "0.5"]
    tmux.start("keys", argv)
    tmux.start("ctrl-c", [*argv, "--view", "devices"])
    first = tmux.wait_for("keys", lambda s: "q quit" in s and "llm-pretrain" in s)
    assert "view containers   sort name (A-Z)" in first
    assert table_rows(first, "NAMESPACE")[0].startswith("data ")

    tmux.keys("keys", "s")
    by_cpus = tmux.wait_for("keys", lambda s: "sort cpus (largest first)" in s)
    assert "llm-pretrain" in table_rows(by_cpus, "NAMESPACE")[0]

    tmux.keys("keys", "n")
    tmux.wait_for("keys", lambda s: "namespace filter: _" in s)
    tmux.keys("keys", "ml-training", literal=True)
    tmux.keys("keys", "Enter")
    only = tmux.wait_for("keys", lambda s: "filter namespace=ml-training" in s)
    rows = table_rows(only, "NAMESPACE")
    assert rows and all(r.startswith("ml-training ") for r in rows), rows

    tmux.keys("keys", "v")
    devices = tmux.wait_for("keys", lambda s: "view devices" in s and "RESOURCE" in s)
    assert all("ml-training/llm-pretrain" in r for r in table_rows(devices, "RESOURCE"))

    tmux.keys("keys", "q")
    after = tmux.wait_for("keys", lambda s: "EXIT=" in s and "icanon" in s)
    assert "EXIT=0" in after
    assert ICANON_ON.search(after) and ECHO_ON.search(after), after
    assert "RESOURCE" not in after, "the alternate screen was left"

    tmux.wait_for("ctrl-c", lambda s: "view devices" in s and "q quit" in s)
    tmux.keys("ctrl-c", "C-c")
    stopped = tmux.wait_for("ctrl-c", lambda s: "EXIT=" in s and "icanon" in s)
    assert "EXIT=0" in stopped
    assert ICANON_ON.search(stopped) and ECHO_ON.search(stopped), stopped
