"""A network cut a test controls: TCP proxies in front of services, black-holed on demand.

``await cut.route(url)`` starts a proxy (in this process, on a free loopback port) for every
``host:port`` in ``url`` and returns the URL through them. While :meth:`NetworkCut.cut` lasts,
every byte either way is dropped and the connections stay open: no FIN, no RST, nothing for
either end to notice but silence, which is what a partition or a pulled cable looks like (a
clean close, by contrast, makes clients reconnect at once). toxiproxy's ``timeout`` toxic with a
timeout of 0 does the same. Connections opened during a cut are accepted, and dropped likewise.

Unlike a real cut, where TCP resends what was lost, the dropped bytes never arrive: a protocol
that keeps state across messages (HTTP/2's header compression, as gRPC and Pub/Sub use) can be
left out of step until the client reconnects. And traffic flows again the moment the cut
ends, where TCP's backoff between resends can keep a connection silent for up to about as long
again after a real cut heals.

:meth:`NetworkCut.close_at` is a failure of another kind: the next connection whose client sends
given bytes is closed there, before the server sees them, as a service that fails a request
by closing the connection does.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from types import TracebackType
from typing import Any, Self

_ADDRESS = re.compile(r"(?<![\w.])(127\.0\.0\.1|localhost):(\d+)")
"""A ``host:port`` of a local service inside a URL or an option."""


class NetworkCut:
    """Proxies to local services that :meth:`cut` black-holes for a while; an async context."""

    def __init__(self) -> None:
        self.dropped = 0
        """Bytes dropped by cuts so far."""
        self.closed = 0
        """Connections closed by :meth:`close_at` so far."""
        self._cutting = False
        self._close_at: bytes | None = None
        self._servers: dict[str, asyncio.Server] = {}
        self._links: set[asyncio.Task[None]] = set()
        self._ends: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for server in self._servers.values():
            server.close()
        for end in self._ends:  # the pumps read EOF, and each link ends
            end.close()
        await asyncio.gather(*self._links, return_exceptions=True)

    async def route(self, url: str) -> str:
        """``url`` with each local ``host:port`` replaced by a proxy's address."""
        out, end = [], 0
        for match in _ADDRESS.finditer(url):
            out += [url[end : match.start()], await self._proxy(match[1], int(match[2]))]
            end = match.end()
        return "".join([*out, url[end:]])

    async def route_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` with their string values (store URLs, emulator hosts) routed."""
        return {k: await self.route(v) if isinstance(v, str) else v for k, v in options.items()}

    def cut(self, seconds: float) -> None:
        """Drop all traffic from now on, for ``seconds``; then let it through again."""
        self._cutting = True
        asyncio.get_running_loop().call_later(seconds, self._heal)

    def close_at(self, marker: bytes) -> None:
        """Close the next connection whose client sends ``marker`` (once), dropping those bytes."""
        self._close_at = marker

    def _heal(self) -> None:
        self._cutting = False

    async def _proxy(self, host: str, port: int) -> str:
        key = f"{host}:{port}"
        if key not in self._servers:

            async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                link = asyncio.current_task()
                assert link is not None
                self._links.add(link)
                try:
                    await self._link(reader, writer, host, port)
                finally:
                    self._links.discard(link)

            self._servers[key] = await asyncio.start_server(serve, "127.0.0.1", 0)
        server_port = self._servers[key].sockets[0].getsockname()[1]
        return f"127.0.0.1:{server_port}"

    async def _link(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int
    ) -> None:
        """Carry one connection to ``host:port`` until either side closes it."""
        self._ends.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            up_reader, up_writer = None, None
        try:
            if up_reader is not None and up_writer is not None:
                self._ends.add(up_writer)
                await asyncio.gather(
                    self._pump(reader, up_writer, upstream=True), self._pump(up_reader, writer)
                )
        finally:
            for end in (writer, up_writer):
                if end is not None:
                    end.close()
                    self._ends.discard(end)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool = False
    ) -> None:
        """Copy ``reader`` to ``writer`` (dropping what comes during a cut); close on EOF.

        Upstream (client to server), bytes :meth:`close_at` waits for close ``writer`` instead:
        the server closes its end, and the other pump closes the client's.
        """
        with contextlib.suppress(OSError):
            while chunk := await reader.read(65536):
                if self._cutting:
                    self.dropped += len(chunk)
                    continue
                if upstream and self._close_at is not None and self._close_at in chunk:
                    self._close_at = None
                    self.closed += 1
                    break
                writer.write(chunk)
                await writer.drain()
        writer.close()
