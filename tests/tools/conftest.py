from __future__ import annotations

import pytest

from daimon.tools import RunContext


@pytest.fixture
def ctx() -> RunContext[None]:
    return RunContext(run_id="run-1", deps=None, call_id="call-1", tool_name="t")
