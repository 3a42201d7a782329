"""schemathesis against the OpenAPI document, over real HTTP: no 5xx, answers match the document.

Every operation gets schemathesis's default phases (examples, coverage, then 50 generated cases,
valid and invalid) and every check but ``ignored_auth``: auth is probed route by route in
``test_security``, and that check triples the requests. The document is taken from an app built
like the served one (schemathesis's fixture-based loading does not work with pytest 9 yet); the
first test checks that the live server publishes the very same document.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import ignored_auth

from daimon import Agent
from daimon.server import ServerSettings, create_app

from .conftest import TOKEN, Calls, LiveServer, calculator, echo

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _agents() -> dict[str, Agent]:
    calls = Calls()
    return {"calc": calculator(calls), "echo": echo(calls)}


def _document() -> dict[str, Any]:
    return create_app(_agents(), settings=ServerSettings(token=TOKEN)).openapi()


schema = schemathesis.openapi.from_dict(_document())


@pytest.fixture(scope="module")
def served() -> Iterator[LiveServer]:
    with LiveServer(_agents(), token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def test_the_server_publishes_this_document(served: LiveServer) -> None:
    published = served.client(headers=AUTH).get("/openapi.json").json()
    assert published == _document()


@schema.parametrize()
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_the_api_matches_its_document_and_never_fails(
    case: schemathesis.Case, served: LiveServer, session: requests.Session
) -> None:
    case.call_and_validate(
        base_url=served.url, session=session, headers=AUTH, excluded_checks=[ignored_auth]
    )
