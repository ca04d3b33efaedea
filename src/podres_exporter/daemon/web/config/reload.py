"""Reloading: the web-config in force, re-read when its file or a file it names changes."""

from __future__ import annotations

import os
import threading
import time

import structlog

from podres_exporter.core.errors import ConfigError
from podres_exporter.daemon.web.config.load import WebConfig, build
from podres_exporter.daemon.web.config.schema import parse
from podres_exporter.daemon.web.config.source import Source

log = structlog.get_logger(__name__)

# ------------------------------------------------------------------------------ reloading

_Stat = tuple[int, int, int, int] | None  # (device, inode, size, mtime_ns); None: missing
_Fingerprint = tuple[tuple[str, _Stat], ...]


def file_stat(path: str) -> _Stat:
    """What tells a new version of ``path``: a rename onto it (a new inode, as kubelet's
    Secret volumes do through their ``..data`` link, which ``stat`` follows), a
    rewrite in place (size, mtime)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class WebConfigWatcher:
    """The web-config in force, re-read when its file or a file it names changes.

    Loads at construction (a :class:`ConfigError` then means start-up fails).
    :meth:`current` is the server's :data:`WebConfigProvider`: an attribute read, no
    file I/O. A bad new version (or a certificate caught half-written) leaves the last
    good configuration in force and logs one ``web_config_reload_failed`` (once per
    distinct failure); the next good version is taken and logs ``web_config_reloaded``.
    """

    def __init__(self, path: str, *, interval_s: float = 5.0) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.path = path
        self.interval_s = interval_s
        # Reentrant: reload() may be called from a signal handler that interrupted the
        # main thread inside reload().
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: _Fingerprint = ()
        self._failure: str | None = None
        self._config, self._digest = self._load()
        now = time.time()
        self.last_reload_ok = True
        """Whether the last attempt to read the file succeeded."""
        self.last_reload_at = now
        """When the file was last read (Unix time), whether or not that succeeded."""
        self.last_good_at = now
        """When the configuration in force was read (Unix time)."""
        tls = self._config.tls is not None
        log.info("web_config_loaded", file=path, tls=tls, users=len(self._config.users))

    def current(self) -> WebConfig:
        """The configuration in force."""
        return self._config

    def reload(self) -> bool:
        """Read the file now (SIGHUP); whether the new version is in force. Never raises:
        a failure keeps the last good configuration and is logged."""
        return self._reload(quiet_repeat=False)

    def check(self) -> bool | None:
        """Re-read if the file or a file it names changed: None when nothing changed,
        else whether the new version is in force. What the thread does every tick."""
        with self._lock:
            if all(file_stat(path) == seen for path, seen in self._seen):
                return None
            return self._reload(quiet_repeat=True)

    def start(self) -> None:
        """Check every ``interval_s`` in a daemon thread, until :meth:`stop`."""
        with self._lock:
            if self._thread is not None:
                return
            self._stopping.clear()
            self._thread = threading.Thread(
                target=self._run, name="web-config-watcher", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (at most ``timeout`` seconds)."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        failing = False
        while not self._stopping.wait(self.interval_s):
            try:
                self.check()
                failing = False
            except Exception as err:  # noqa: BLE001 - the watcher outlives a bug in a check
                if not failing:
                    log.error("web_config_watch_failed", file=self.path, error=repr(err))
                failing = True

    def _load(self) -> tuple[WebConfig, bytes]:
        """Read the file and what it names, noting their identities first (so that a
        change during the read is seen at the next check); the configuration and a
        digest of every byte read."""
        source = Source(self.path)
        seen: list[tuple[str, _Stat]] = [(self.path, file_stat(self.path))]
        self._seen = tuple(seen)
        spec = parse(source)
        seen += [(path, file_stat(path)) for path in spec.files]
        self._seen = tuple(seen)
        config = build(source, spec)
        return config, source.digest.digest()

    def _reload(self, *, quiet_repeat: bool) -> bool:
        with self._lock:
            self.last_reload_at = time.time()
            try:
                config, digest = self._load()
            except ConfigError as err:
                message = str(err)
                self.last_reload_ok = False
                if not (quiet_repeat and message == self._failure):
                    log.warning("web_config_reload_failed", file=self.path, error=message)
                self._failure = message
                return False
            recovered = self._failure is not None
            self._failure = None
            self.last_reload_ok = True
            self.last_good_at = self.last_reload_at
            if digest == self._digest:
                # The same bytes: the configuration in force stays (and with it the
                # remembered logins); nothing changed, so nothing to announce.
                log.info("web_config_unchanged", file=self.path, recovered=recovered)
                return True
            self._config, self._digest = config, digest
            log.info(
                "web_config_reloaded",
                file=self.path,
                tls=config.tls is not None,
                users=len(config.users),
            )
            return True
