"""A rate-limited OpenAI-compatible provider, run as a process of its own by the fleet tests.

``python fake_provider.py '{"requests": 20, "tokens": 2400, "period": 2.0}'`` binds a free port on
127.0.0.1, prints it on the first line of stdout, and answers ``POST /v1/chat/completions`` (and
``POST /p/{process}/v1/chat/completions``: the same, with the calling process named in the path)
in OpenAI's wire format, streamed or not.

It limits as OpenAI does: one bucket of ``requests`` and one of ``tokens`` per ``period`` (a
minute at OpenAI; shortened here), each refilled continuously at its limit per period. A request
costs one request and, at admission, its estimated prompt tokens (characters / 4, plus 4 per
message) plus its ``max_completion_tokens`` (or ``max_tokens``, else ``default_max_tokens``):
OpenAI counts what a call may use, not what it used. A request either bucket cannot pay for is
refused with 429, ``Retry-After`` / ``retry-after-ms`` (when it could pay) and OpenAI's error
body; every answer, success or 429, carries OpenAI's ``x-ratelimit-*`` headers.

``GET /_records`` lists every request, accepted or refused (``t`` on this process's monotonic
clock, in seconds); ``POST /_limits`` starts afresh under new limits (a JSON body like the
argument): full buckets, no records.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Bucket:
    """``limit`` per ``period``, refilled continuously; starts full."""

    limit: float
    period: float
    level: float = -1.0
    at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.level < 0:
            self.level = self.limit

    def refill(self, now: float) -> None:
        self.level = min(self.limit, self.level + (now - self.at) * self.limit / self.period)
        self.at = now

    def wait(self, cost: float) -> float:
        """Seconds until the bucket holds ``cost`` (clamped to the limit); 0 if it does now."""
        short = min(cost, self.limit) - self.level
        return max(0.0, short * self.period / self.limit)

    def reset(self) -> float:
        """Seconds until the bucket is full again (OpenAI's ``x-ratelimit-reset-*``)."""
        return (self.limit - self.level) * self.period / self.limit


def duration(seconds: float) -> str:
    """A duration as OpenAI writes it in ``x-ratelimit-reset-*``: ``20ms``, ``1.5s``, ``1m2s``."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{round(rest, 3):g}s"


def prompt_tokens(body: dict[str, Any]) -> int:
    """OpenAI's estimate before the call: characters / 4 of the messages, 4 more per message."""
    chars, count = 0, 0
    for message in body.get("messages") or []:
        count += 1
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(part.get("text") or "") for part in content if isinstance(part, dict))
    chars += len(json.dumps(body.get("tools"))) if body.get("tools") else 0
    return max(1, math.ceil(chars / 4) + 4 * count)


class Provider:
    """The limits, the buckets and the record of every request."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.records: list[dict[str, Any]] = []
        self.latency = float(config.get("latency", 0.02))
        self.completion_tokens = int(config.get("completion_tokens", 5))
        self.default_max_tokens = int(config.get("default_max_tokens", 1024))
        self.configure(config)

    def configure(self, config: dict[str, Any]) -> None:
        period = float(config.get("period", 60.0))
        self.requests = Bucket(float(config["requests"]), period)
        self.tokens = Bucket(float(config["tokens"]), period)

    def admit(self, process: str, body: dict[str, Any]) -> tuple[bool, int, float]:
        """Take the request's cost if both buckets hold it: (admitted, prompt tokens, wait)."""
        now = time.monotonic()
        prompt = prompt_tokens(body)
        most = body.get("max_completion_tokens") or body.get("max_tokens")
        cost = prompt + int(most or self.default_max_tokens)
        for bucket in (self.requests, self.tokens):
            bucket.refill(now)
        wait = max(self.requests.wait(1), self.tokens.wait(cost))
        admitted = wait == 0
        if admitted:
            self.requests.level -= 1
            self.tokens.level -= cost
        self.records.append(
            {
                "t": now,
                "process": process,
                "status": 200 if admitted else 429,
                "cost": cost,
                "stream": bool(body.get("stream")),
            }
        )
        return admitted, prompt, wait

    def headers(self) -> dict[str, str]:
        """OpenAI's rate-limit headers, as of now."""
        requests, tokens = self.requests, self.tokens
        return {
            "x-ratelimit-limit-requests": str(int(requests.limit)),
            "x-ratelimit-limit-tokens": str(int(tokens.limit)),
            "x-ratelimit-remaining-requests": str(max(0, math.floor(requests.level))),
            "x-ratelimit-remaining-tokens": str(max(0, math.floor(tokens.level))),
            "x-ratelimit-reset-requests": duration(requests.reset()),
            "x-ratelimit-reset-tokens": duration(tokens.reset()),
        }


def refusal(provider: Provider, wait: float, model: str) -> Response:
    """OpenAI's 429: the error body, ``Retry-After`` (seconds) and ``retry-after-ms``."""
    which = "requests" if provider.requests.wait(1) > 0 else "tokens"
    message = (
        f"Rate limit reached for {model} on {which} per min: Please try again in "
        f"{duration(wait)}. Visit https://platform.openai.com/account/rate-limits to learn more."
    )
    error = {"message": message, "type": which, "param": None, "code": "rate_limit_exceeded"}
    headers = {
        **provider.headers(),
        "retry-after": str(max(1, math.ceil(wait))),
        "retry-after-ms": str(max(1, math.ceil(wait * 1000))),
    }
    return JSONResponse({"error": error}, status_code=429, headers=headers)


def completion(body: dict[str, Any], prompt: int, completion_tokens: int) -> dict[str, Any]:
    """A chat.completion answering ``body``."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "system_fingerprint": "fp_fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        },
    }


def chunks(answer: dict[str, Any]) -> list[str]:
    """``answer`` as OpenAI's SSE chunks: the text, the finish, the usage, ``[DONE]``."""
    base = {k: answer[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    text = answer["choices"][0]["message"]["content"]
    deltas = [
        [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}],
        [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    ]
    events = [{**base, "choices": choices} for choices in deltas]
    events.append({**base, "choices": [], "usage": answer["usage"]})
    return [f"data: {json.dumps(event)}\n\n" for event in events] + ["data: [DONE]\n\n"]


def build(provider: Provider) -> Starlette:
    """The provider's HTTP app."""

    async def chat(request: Request) -> Response:
        body = await request.json()
        process = request.path_params.get("process", "-")
        admitted, prompt, wait = provider.admit(process, body)
        if not admitted:
            return refusal(provider, wait, str(body.get("model")))
        headers = provider.headers()  # as of the admission, like OpenAI's
        await asyncio.sleep(provider.latency)
        answer = completion(body, prompt, provider.completion_tokens)
        if not body.get("stream"):
            return JSONResponse(answer, headers=headers)
        return StreamingResponse(
            iter(chunks(answer)), media_type="text/event-stream", headers=headers
        )

    async def records(request: Request) -> Response:
        return JSONResponse(provider.records)

    async def limits(request: Request) -> Response:
        provider.configure(await request.json())
        provider.records.clear()
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/p/{process}/v1/chat/completions", chat, methods=["POST"]),
            Route("/_records", records, methods=["GET"]),
            Route("/_limits", limits, methods=["POST"]),
        ]
    )


def main() -> None:
    """Serve on a free port; print the port first."""
    provider = Provider(json.loads(sys.argv[1]))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(build(provider), log_level="warning", access_log=False)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
