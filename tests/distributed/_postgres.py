"""A private PostgreSQL server for tests that stop and restart one (never the shared server).

``initdb`` makes a cluster in a temporary directory (about 2 s); the server then starts in a
fraction of a second, on a free port, and stops with a fast shutdown (SIGINT: sessions are
closed, the data checkpointed), keeping its data for the next start. As root, the server runs
as the ``postgres`` user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

BIN = Path(os.environ.get("DAIMON_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
"""Where ``initdb`` and ``postgres`` are (Debian's PostgreSQL 15 by default)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PrivatePostgres:
    """A PostgreSQL cluster of a test's own: :meth:`start` and :meth:`stop` at will."""

    def __init__(self) -> None:
        if not (BIN / "initdb").exists():
            pytest.fail(f"no initdb in {BIN}: install postgresql or set DAIMON_TEST_PG_BIN")
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        # Not under pytest's tmp_path: the server runs as another user, and pytest keeps its
        # temporary directories private.
        self._dir = Path(tempfile.mkdtemp(prefix="daimon-pg-"))
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user:
            shutil.chown(self._dir, self._user)
        self._proc: subprocess.Popen[bytes] | None = None
        argv = [str(BIN / "initdb"), "-D", str(self._dir / "data"), "-U", "postgres"]
        subprocess.run(
            [*argv, "-A", "trust", "-E", "UTF8", "--no-sync"],
            check=True,
            capture_output=True,
            user=self._user,
        )

    def start(self) -> None:
        """Start the server (on the same port every time); return once it takes connections."""
        argv = [str(BIN / "postgres"), "-D", str(self._dir / "data"), "-p", str(self.port)]
        argv += ["-k", str(self._dir), "-c", "listen_addresses=127.0.0.1"]
        self._proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=self._user
        )
        deadline = time.monotonic() + 30
        while not self._accepts():
            assert self._proc.poll() is None, f"postgres exited with {self._proc.returncode}"
            assert time.monotonic() < deadline, "postgres did not start"
            time.sleep(0.02)

    def _accepts(self) -> bool:
        ready = subprocess.run(
            [str(BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
            check=False,
        )
        return ready.returncode == 0

    def stop(self) -> None:
        """Stop the server (a fast shutdown), waiting for it to exit."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def remove(self) -> None:
        """Stop the server and delete its data."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started private server, removed afterwards."""
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        server.remove()
