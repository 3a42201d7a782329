"""Push notifications: webhook delivery with retries, and the check of a webhook's address.

The SDK's ``BasePushNotificationSender`` posts each task update to the webhooks a client set
for the task, with the config's ``token`` in ``X-A2A-Notification-Token`` (the receiver checks
it is the one it gave) and its ``authentication`` as an ``Authorization`` header. It tries
once; daimon gives it an HTTP client whose transport retries a failed delivery (a connection
error, a 429 or a 5xx answer) with exponential backoff, and follows no redirects.

A server reachable from other machines refuses webhooks that point at loopback, private,
link-local or otherwise non-public addresses (the SDK's policy, which resolves the name), both
when the config is set (an invalid-params error that says why) and again at each delivery (a
name may resolve elsewhere later). A loopback-only server accepts any ``http(s)`` webhook.
"""

from __future__ import annotations

from daimon.a2a import _sdk  # noqa: F401  # isort: skip - first: names the extra

import asyncio
from collections.abc import Awaitable, Callable

import httpx
from a2a.server.tasks import BasePushNotificationSender, PushNotificationConfigStore
from a2a.utils.errors import InvalidParamsError
from a2a.utils.push_url_validator import validate_push_notification_url

__all__ = ("RetryingTransport", "push_sender", "webhook_check")

RETRIES = 3
"""Deliveries tried again after the first fails (4 attempts in all)."""
BACKOFF_SECONDS = 0.25
"""The wait before the first retry; it doubles each time."""
_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class RetryingTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends a request again when it fails for a passing reason.

    A transport error (refused, reset, timed out) or an answer of 408, 425, 429 or 5xx is retried
    up to ``retries`` times, waiting ``backoff``, then twice that, and so on. Any other answer is
    final. Webhook bodies are small JSON documents, so each attempt re-sends the same bytes.
    """

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | None = None,
        *,
        retries: int = RETRIES,
        backoff: float = BACKOFF_SECONDS,
    ) -> None:
        self._inner = inner or httpx.AsyncHTTPTransport()
        self._retries = retries
        self._backoff = backoff

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        wait = self._backoff
        for attempt in range(self._retries + 1):
            last = attempt == self._retries
            retry = httpx.Request(
                request.method, request.url, headers=request.headers, content=body
            )
            try:
                response = await self._inner.handle_async_request(retry)
            except httpx.TransportError:
                if last:
                    raise
            else:
                if last or response.status_code not in _RETRY_STATUS:
                    return response
                await response.aclose()
            await asyncio.sleep(wait)
            wait *= 2
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def aclose(self) -> None:
        await self._inner.aclose()


def webhook_check(exposed: bool) -> Callable[[str], Awaitable[bool]] | None:
    """The check of a webhook URL for a server: refuse non-public addresses when ``exposed``."""
    return _public_webhook if exposed else None


async def _public_webhook(url: str) -> bool:
    """Accept ``url`` only if it is http(s) and every address its host resolves to is public.

    Raises:
        InvalidParamsError: It is not (the SDK reports the error to the client as it is).
    """
    if await validate_push_notification_url(url):
        return True
    raise InvalidParamsError(
        message=(
            f"push notification URL {url[:200]!r} refused: this server is reachable from "
            "other machines, so a webhook must be http(s) on a public address (not loopback, "
            "private, link-local or reserved), and its host must resolve"
        )
    )


def push_sender(
    store: PushNotificationConfigStore, *, exposed: bool, timeout: float = 10.0
) -> tuple[BasePushNotificationSender, httpx.AsyncClient]:
    """The SDK's webhook sender over a retrying HTTP client; close the client when done."""
    http = httpx.AsyncClient(transport=RetryingTransport(), timeout=timeout, follow_redirects=False)
    check = webhook_check(exposed)
    quiet = _quietly(check) if check is not None else None
    return BasePushNotificationSender(http, store, push_url_validator=quiet), http


def _quietly(check: Callable[[str], Awaitable[bool]]) -> Callable[[str], Awaitable[bool]]:
    """``check`` answering ``False`` instead of raising (at delivery there is no client to tell)."""

    async def checked(url: str) -> bool:
        try:
            return await check(url)
        except InvalidParamsError:
            return False

    return checked
