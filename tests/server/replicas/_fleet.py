"""``daimon serve`` replicas as real processes on one state store, and an SSE reader for them.

Each replica is started as a user would (``python -m daimon.cli serve ... --store URL``) on a
free port; :func:`replicas` stops them all (SIGTERM, then SIGKILL after a grace).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Replica:
    """One ``daimon serve`` process."""

    name: str
    port: int
    args: list[str]
    env: dict[str, str]
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        return self.launch().wait_ready()

    def launch(self) -> Replica:
        """Start the process; :meth:`wait_ready` waits for it to serve."""
        with open(self.folder / f"{self.name}.stderr", "ab") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daimon.cli", *self.args],
                env=self.env,
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        return self

    def wait_ready(self) -> Replica:
        """Return once ``/ready`` answers 200 (fail after 30 s, or if the process exits)."""
        assert self.process is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"{self.name} exited:\n{self.stderr()}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/ready", timeout=2).status_code == 200:
                    return self
            time.sleep(0.1)
        raise AssertionError(f"{self.name} was not ready in 30 s:\n{self.stderr()}")

    def stop(self, sig: int = signal.SIGTERM, wait: float = 30) -> int:
        """Send ``sig`` and wait for the exit; its code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(wait)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(10)

    def stderr(self) -> str:
        text = (self.folder / f"{self.name}.stderr").read_text(errors="replace")
        return "\n".join(text.splitlines()[-20:])


@dataclass
class Replicas:
    """The replicas of one test, and the ledger file their tool writes."""

    members: list[Replica] = field(default_factory=list[Replica])
    ledger: Path = Path(os.devnull)

    def __getitem__(self, index: int) -> Replica:
        return self.members[index]

    def notes(self) -> list[str]:
        """The lines the tool ``record`` wrote, one per run of it."""
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []


@contextlib.contextmanager
def replicas(folder: Path, store: str, count: int, **env: str) -> Iterator[Replicas]:
    """``count`` replicas of ``replica_app:agent`` on ``store``, started; stopped after."""
    ledger = folder / "ledger.txt"
    base = dict(os.environ)
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), base.get("PYTHONPATH")]))
    base.update(PYTHONUNBUFFERED="1", REPLICA_LEDGER=str(ledger), **env)
    group = Replicas(ledger=ledger)
    try:
        for index in range(count):  # started side by side: each takes a second or two
            port = free_port()
            args = ["serve", "replica_app:agent", "--port", str(port), "--no-ui", "--store", store]
            group.members.append(Replica(f"replica{index}", port, args, base, folder).launch())
        for member in group.members:
            member.wait_ready()
        yield group
    finally:
        for member in group.members:
            if member.process is not None:
                member.stop(signal.SIGTERM, wait=15)


@dataclass
class Frame:
    """One server-sent event."""

    id: str | None
    event: str | None
    data: str


def read_frames(
    url: str, body: dict[str, Any], *, last_event_id: str | None = None, stop_after: int = 0
) -> list[Frame]:
    """POST ``body`` to ``url`` and read its event stream (to the end, or ``stop_after`` frames,
    then hang up)."""
    frames: list[Frame] = []
    for frame in stream_frames(url, body, last_event_id=last_event_id):
        frames.append(frame)
        if stop_after and len(frames) == stop_after:
            break
    return frames


def stream_frames(
    url: str, body: dict[str, Any], *, last_event_id: str | None = None
) -> Iterator[Frame]:
    """POST ``body`` to ``url``; its event stream's frames as they come (closing it, the
    caller hangs up)."""
    headers = {"last-event-id": last_event_id} if last_event_id else {}
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as response:
        assert response.status_code == 200, response.read().decode()
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line.startswith(":"):
                continue
            if line == "":
                if "data" in fields:
                    yield Frame(fields.get("id"), fields.get("event"), fields["data"])
                fields = {}
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
