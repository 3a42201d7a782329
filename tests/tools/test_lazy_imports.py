"""What ``from daimon import Agent, tool`` leaves unloaded, checked in a fresh interpreter.

datetime, uuid (with platform) and random are loaded only by code that needs them: a tool whose
hints or results use datetime or UUID values has imported them itself, and random is needed only
by a retry's jitter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_LOADED = """
import json, sys
{statement}
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(statement: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-P", "-c", _LOADED.format(statement=statement)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.parametrize("module", ["datetime", "uuid", "platform", "random"])
def test_agent_and_tool_do_not_load(module: str) -> None:
    assert module not in _loaded("from daimon import Agent, tool"), module


def test_a_tool_on_datetime_and_uuid_still_gets_formats_and_values() -> None:
    statement = """
import asyncio, datetime, uuid
from daimon import tool
from daimon.tools import RunContext

@tool
def shift(day: datetime.date, key: uuid.UUID) -> datetime.date:
    assert isinstance(key, uuid.UUID)
    return day + datetime.timedelta(days=1)

props = shift.spec.parameters["properties"]
assert props["day"] == {"type": "string", "format": "date"}, props
assert props["key"] == {"type": "string", "format": "uuid"}, props
arguments = {"day": "2026-11-30", "key": str(uuid.uuid4())}
out = asyncio.run(shift.execute(arguments, RunContext(run_id="r", deps=None)))
assert out.content == '"2026-12-01"', out
"""
    assert "uuid" in _loaded(statement)
