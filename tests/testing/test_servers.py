from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from daimon.testing import serving


def _app(text: str) -> Starlette:
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse(text)

    return Starlette(routes=[Route("/", hello)])


async def test_serves_an_app_in_the_running_loop() -> None:
    async with serving(_app("hi")) as url, httpx.AsyncClient() as client:
        assert (await client.get(url)).text == "hi"


async def test_an_app_can_be_built_for_its_own_port() -> None:
    ports: list[int] = []

    def build(port: int) -> Starlette:
        ports.append(port)
        return _app(str(port))

    async with serving(app_for_port=build) as url, httpx.AsyncClient() as client:
        assert url == f"http://127.0.0.1:{ports[0]}"
        assert (await client.get(url)).text == str(ports[0])


async def test_exactly_one_app_is_given() -> None:
    with pytest.raises(TypeError, match="exactly one"):
        async with serving():
            pass
    with pytest.raises(TypeError, match="exactly one"):
        async with serving(_app("a"), app_for_port=lambda port: _app("b")):
            pass
