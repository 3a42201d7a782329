"""ServerSettings: how the HTTP server listens and what it lets in (standard library only)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from daimon._http_gate import (
    DEFAULT_MAX_BODY_BYTES,
    HostAllowList,
    check_exposure,
    check_limit,
    default_hosts,
    is_loopback,
)
from daimon.core.errors import BuilderError
from daimon.kit.checks import check_seconds
from daimon.kit.media import (
    DEFAULT_FILE_TYPES,
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_FILES_BYTES,
    check_file_limits,
)

if TYPE_CHECKING:
    from daimon.core.protocols import Broker
    from daimon.core.state_store import StateStore

__all__ = ("DEFAULT_FILE_TYPES", "ServerSettings")

_DAY = 86_400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """How the server listens, whom it lets in and what it bounds.

    Secure by default: it binds 127.0.0.1, and any other address needs a ``token``, so an
    unauthenticated agent is never reachable from another machine. Even on loopback, requests
    whose ``Host`` is not an allowed name (DNS rebinding) or whose ``Origin`` is another site's
    are refused with 403.
    """

    host: str = "127.0.0.1"
    """The address to bind. Anything but loopback needs ``token``."""
    port: int = 8000
    """The TCP port to bind (also the port the default host allowlist expects; with 0, the
    system picks one and the allowlist accepts the loopback names with any port)."""
    token: str | None = None
    """The bearer token every request must carry (``Authorization: Bearer <token>``)."""
    allowed_hosts: tuple[str, ...] | None = None
    """``Host`` header values accepted: ``"name"`` (any port), ``"name:port"``, ``"*.domain"``
    or ``"*"`` (any). ``None``: ``localhost``, ``127.0.0.1`` and ``[::1]`` with ``port``, plus
    the bound address when it is a specific one. Binding a wildcard address (``0.0.0.0``, ``::``)
    needs an explicit list: the server cannot guess the names clients will use. A pattern that
    can never match a ``Host`` header is refused."""
    allowed_origins: tuple[str, ...] = ()
    """Browser origins (``"https://app.example.com"``) allowed besides the server's own; a request
    from any other ``Origin`` is refused. Requests without an ``Origin`` (non-browser clients)
    are not affected."""
    cors_origins: tuple[str, ...] = ()
    """Origins sent CORS headers (and allowed as by ``allowed_origins``). Empty: CORS is off."""
    public_paths: tuple[str, ...] = ("/health",)
    """Paths served without the token (liveness only, by default)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """The largest request body accepted; a larger one gets 413 before it is read."""
    request_timeout: float = 300.0
    """Seconds a run may take; then it is cancelled (504, or an ``error`` event on a stream)."""
    heartbeat_interval: float = 15.0
    """Longest silence on an event stream: a comment line is sent when nothing else was."""
    ui: bool = False
    """Serve the web playground and run inspector at ``/`` (its files hold no secret and load
    without the token; the API calls it makes send it). Off by default, so an API-only server
    exposes no page; ``daimon serve`` turns it on (``--no-ui`` leaves it off)."""
    title: str = "daimon"
    """The title of the OpenAPI document."""
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    """The largest file (decoded) a user message may carry on ``/agui``; a larger one is 413.
    ``max_body_bytes`` bounds the whole request first (base64 makes a file a third larger)."""
    max_files_bytes: int = DEFAULT_MAX_FILES_BYTES
    """The most bytes of files (decoded) one user message may carry together (413 past it)."""
    file_types: tuple[str, ...] = DEFAULT_FILE_TYPES
    """The media types a user message's files may have (``type/subtype``, or ``type/*``); any
    other is 415. Images, audio, PDFs and text files are what the models take."""

    store: StateStore | str | None = None
    """Where the server keeps what it remembers between requests: paused runs, stored and
    background responses, the events of its streams. ``None``: this process's memory (bounded,
    lost on restart). A URL (``postgresql://...``, ``redis://...``, ``sqlite:///file.db`` for one
    host) or a
    :class:`~daimon.core.StateStore` shared by replicas lets any of them answer any follow-up."""
    keep_for: float | None = 30 * _DAY
    """Seconds the server keeps paused runs and stored responses (``None``: until answered or
    deleted). A store in memory also keeps only the newest 1,000 of each."""
    stream_grace: float = 30.0
    """Seconds a streamed run goes on while no client reads it (a client may reconnect with
    ``Last-Event-ID`` meanwhile); then it is cancelled."""
    stream_retention: float = 600.0
    """Seconds a stream's events are kept after its last one, for clients that reconnect."""
    drain_timeout: float = 30.0
    """Seconds running streamed runs get to finish when the server shuts down; then they are
    cancelled."""
    broker: Broker | str | None = None
    """Where agents' runs (``/prompt``, ``/prompt/stream``; not flows', nor those of the OpenAI
    and AG-UI routes) go as tasks for ``daimon worker`` processes, instead of running in the
    server: a :class:`~daimon.core.Broker` or a URL (``redis://...``, ``nats://...``,
    ``postgresql://...``; see :func:`daimon.distributed.broker_from_url`; a broker made from a
    URL is closed at shutdown). The workers write the runs' events to the server's ``store``
    (``daimon worker --store``), so it must be one they share. ``None``: the server runs them
    itself."""
    queue: str | None = None
    """The broker's queue the tasks go to (default: the broker's); only with a broker URL."""

    def __post_init__(self) -> None:
        if not isinstance(self.host, str):
            raise BuilderError(f"host must be a string, got {self.host!r}")
        if type(self.port) is not int or not 0 <= self.port <= 65535:
            raise BuilderError(f"port must be an integer from 0 to 65535, got {self.port!r}")
        if type(self.ui) is not bool:
            raise BuilderError(f"ui must be True or False, got {self.ui!r}")
        check_limit(self.max_body_bytes)
        check_file_limits(self.file_types, self.max_file_bytes, self.max_files_bytes)
        for name in ("request_timeout", "heartbeat_interval", "stream_grace", "stream_retention"):
            check_seconds(name, getattr(self, name))
        _check_drain(self.drain_timeout)
        if self.keep_for is not None:
            check_seconds("keep_for", self.keep_for)
        _check_store(self.store)
        _check_broker(self.broker, self.queue, self.store)
        for name in ("allowed_origins", "cors_origins", "public_paths"):
            _check_strings(name, getattr(self, name))
        if self.allowed_hosts is not None:
            _check_strings("allowed_hosts", self.allowed_hosts)
            HostAllowList(self.allowed_hosts)  # refuses a pattern that can never match
        check_exposure(self.host, self.token)
        if self.allowed_hosts is None and default_hosts(self.host, self.port) is None:
            raise BuilderError(
                f"binding the wildcard address {self.host!r} needs allowed_hosts: the host names "
                "clients use to reach this server (for example ('api.example.com',)), or ('*',) "
                "to accept any Host header"
            )

    @property
    def is_loopback(self) -> bool:
        """Whether ``host`` is a loopback address, reachable from this machine only."""
        return is_loopback(self.host)

    @property
    def host_allowlist(self) -> frozenset[str]:
        """The ``Host`` patterns accepted, lower-cased (see ``allowed_hosts``)."""
        if self.allowed_hosts is not None:
            return frozenset(h.lower() for h in self.allowed_hosts)
        return frozenset(default_hosts(self.host, self.port) or ())  # never a wildcard bind


def _check_drain(value: object) -> None:
    """``drain_timeout``: seconds, 0 included (no drain)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise BuilderError(f"drain_timeout must be a non-negative number of seconds, got {value!r}")


def _check_store(store: object) -> None:
    if store is None or callable(getattr(store, "append", None)):
        return
    if not isinstance(store, str):
        raise BuilderError(f"store must be a StateStore or a URL, got {store!r}")
    from daimon.serverstate import check_state_store_url

    check_state_store_url(store)


def _check_broker(broker: object, queue: object, store: object) -> None:
    if queue is not None and (not isinstance(queue, str) or not queue):
        raise BuilderError(f"queue must be a non-empty string, got {queue!r}")
    if broker is None:
        if queue is not None:
            raise BuilderError("queue names a queue of the broker: it needs a broker")
        return
    if isinstance(broker, str):
        from daimon.distributed._urls import _SCHEMES as BROKER_SCHEMES

        scheme, sep, _ = broker.partition(":")
        if not sep or scheme.lower() not in BROKER_SCHEMES:
            known = ", ".join(f"{s}://" for s in sorted(BROKER_SCHEMES))
            raise BuilderError(f"unknown broker URL {broker!r}; expected one of {known}")
    elif not callable(getattr(broker, "submit", None)):
        raise BuilderError(f"broker must be a Broker or a URL, got {broker!r}")
    elif queue is not None:
        raise BuilderError("queue goes with a broker URL: a Broker object has its queue already")
    if store is None:
        raise BuilderError(
            "a broker needs a store the workers share (store='postgresql://...' or "
            "'redis://...'): the workers write the runs' events there, for the server to read"
        )


def _check_strings(name: str, values: object) -> None:
    if not isinstance(values, tuple) or not all(isinstance(v, str) and v for v in values):
        raise BuilderError(f"{name} must be a tuple of non-empty strings, got {values!r}")
