"""Hosts on one machine: network namespaces on a bridge, links that can be cut, a Redis on it.

:func:`network` builds a bridge on the host and one namespace per "host", each joined to the
bridge by a veth pair; :meth:`Network.cut` takes a host's bridge port down (its packets are
dropped, as when a switch port dies: the host's side stays up, so its connections hang rather
than fail) and :meth:`Network.heal` brings it back. :func:`redis_server` starts a ``redis-server``
bound to the bridge's address, which the host and every namespace reach. Names carry a random
suffix, so a leftover of a crashed run cannot clash; everything is removed on exit, even on
failure. Needs root (``ip netns``); raises, never skips, when it cannot build the network.
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REDIS_SERVER = "/usr/bin/redis-server"


def ip(*args: str) -> None:
    """Run ``ip ARGS``; an error says what failed."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")


def _subnet() -> ipaddress.IPv4Network:
    """A random /24 in 10.0.0.0/8 that overlaps no network of this host."""
    listed = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    used = [ipaddress.IPv4Interface(line.split()[3]).network for line in listed.splitlines()]
    for _ in range(50):
        net = ipaddress.IPv4Network(f"10.{random.randint(100, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(other) for other in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet for the test network")


@dataclass
class Host:
    """A namespace on the bridge: its name, address, and the host-side end of its link."""

    namespace: str
    address: str
    port: str
    """The veth end on the bridge (what :meth:`Network.cut` takes down)."""

    def command(self, *argv: str) -> list[str]:
        """``argv`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


@dataclass
class Network:
    """A bridge with an address on the host, and namespaces joined to it."""

    tag: str
    subnet: ipaddress.IPv4Network
    hosts: list[Host] = field(default_factory=list[Host])
    _cleanup: list[list[str]] = field(default_factory=list[list[str]])

    @property
    def bridge(self) -> str:
        return f"dbr{self.tag}"

    @property
    def address(self) -> str:
        """The bridge's address: the host machine, as the namespaces reach it."""
        return str(self.subnet.network_address + 1)

    def add_host(self) -> Host:
        index = len(self.hosts)
        namespace, port, inner = f"dns{self.tag}-{index}", f"dvh{self.tag}{index}", "eth0"
        peer = f"dvn{self.tag}{index}"
        address = str(self.subnet.network_address + 2 + index)
        ip("netns", "add", namespace)
        self._cleanup.append(["netns", "del", namespace])
        ip("link", "add", port, "type", "veth", "peer", "name", peer)
        self._cleanup.append(["link", "del", port])
        ip("link", "set", peer, "netns", namespace)
        ip("link", "set", port, "master", self.bridge)
        ip("link", "set", port, "up")
        inside = ("-n", namespace)
        ip(*inside, "link", "set", peer, "name", inner)
        ip(*inside, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", inner)
        ip(*inside, "link", "set", inner, "up")
        ip(*inside, "link", "set", "lo", "up")
        host = Host(namespace, address, port)
        self.hosts.append(host)
        return host

    def cut(self, host: Host) -> None:
        """Drop every packet to and from ``host`` (its bridge port goes down)."""
        ip("link", "set", host.port, "down")

    def heal(self, host: Host) -> None:
        """Reconnect ``host`` (its bridge port comes up, and forwards again)."""
        ip("link", "set", host.port, "up")

    def remove(self) -> list[str]:
        """Remove what was made, newest first; the errors (empty when all went)."""
        errors = []
        for args in reversed(self._cleanup):
            try:
                ip(*args)
            except RuntimeError as exc:
                errors.append(str(exc))
        self._cleanup.clear()
        return errors


@contextlib.contextmanager
def network(hosts: int) -> Iterator[Network]:
    """A bridge and ``hosts`` namespaces on it; all removed after, even on failure.

    Raises:
        RuntimeError: ``ip`` cannot build it (not root, no ``ip``, no netns support).
    """
    if shutil.which("ip") is None:
        raise RuntimeError("the partition tests need `ip` (iproute2) and root")
    net = Network(uuid.uuid4().hex[:6], _subnet())
    try:
        ip("link", "add", net.bridge, "type", "bridge")
        net._cleanup.append(["link", "del", net.bridge])
        ip("addr", "add", f"{net.address}/{net.subnet.prefixlen}", "dev", net.bridge)
        ip("link", "set", net.bridge, "up")
        for _ in range(hosts):
            net.add_host()
        yield net
    finally:
        errors = net.remove()
        assert not errors, f"could not remove the test network: {errors}"


def free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def redis_server(address: str, folder: Path) -> Iterator[str]:
    """A ``redis-server`` on ``address`` (no persistence), its URL; stopped after."""
    port = free_port(address)
    log = folder / "redis.log"
    process = subprocess.Popen(
        [
            *(REDIS_SERVER, "--bind", address, "--port", str(port), "--save", ""),
            *("--appendonly", "no", "--protected-mode", "no", "--dir", str(folder)),
            *("--logfile", str(log)),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            assert process.poll() is None, f"redis-server exited: {log.read_text()[-2000:]}"
            with contextlib.suppress(OSError), socket.create_connection((address, port), 0.5):
                break
            assert time.monotonic() < deadline, "redis-server did not listen in 10 s"
            time.sleep(0.05)
        yield f"redis://{address}:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
