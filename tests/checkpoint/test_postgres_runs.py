"""The agent-level run scenarios of tests/agent on PostgresCheckpoint.

Every test of tests/agent/test_effects.py (the effect ledger: once, keyed, repeatable and ask
calls in doubt; the intent stored before the tool runs) and tests/agent/test_resume_claims.py
(two resumers of a run that died mid-tool run it once) that runs on each store of their
``STORES`` list runs here on PostgreSQL too, unchanged: this module adds the store, those files
stay as they are.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from daimon.checkpoint.postgres import PostgresCheckpoint
from daimon.core.protocols import Checkpoint

pytestmark = pytest.mark.service("postgres")

AGENT_TESTS = Path(__file__).parents[1] / "agent"


def _agent_tests(name: str) -> Any:
    """tests/agent/<name>.py as a module (tests/ is not a package)."""
    qualified = f"_daimon_tests_agent_{name}"
    if qualified not in sys.modules:
        spec = importlib.util.spec_from_file_location(qualified, AGENT_TESTS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
    return sys.modules[qualified]


def _runs_on_every_store(test: Any) -> bool:
    """Whether ``test`` is parametrized over its module's ``STORES``."""
    return any(
        mark.name == "parametrize" and mark.args[0] == "make_store"
        for mark in getattr(test, "pytestmark", ())
    )


def _on_postgres(
    test: Callable[[Any], Coroutine[Any, Any, None]],
) -> Callable[[Any], Coroutine[Any, Any, None]]:
    """``test`` as a test of this module, given PostgreSQL handles as its ``make_store``."""

    @functools.wraps(test)
    async def run(make_store: Any) -> None:
        await test(make_store)

    del run.__wrapped__  # pytest would read the original's marks and signature through it
    run.__dict__.pop("pytestmark", None)
    return run


@pytest.fixture
async def make_store(postgres_url: str, postgres_prefix: str) -> AsyncIterator[Any]:
    """New pools on one database under one prefix, as separate processes would open (the lease
    is short, as in tests/agent/test_effects.py)."""
    handles: list[PostgresCheckpoint] = []

    def make() -> Checkpoint:
        handles.append(PostgresCheckpoint(postgres_url, prefix=postgres_prefix, lease=0.2))
        return handles[-1]

    yield make
    for handle in handles:
        await handle.aclose()


_COLLECTED: list[str] = []
for _module in (_agent_tests("test_effects"), _agent_tests("test_resume_claims")):
    for _name, _test in vars(_module).items():
        if _name.startswith("test_") and _runs_on_every_store(_test):
            globals()[_name] = _on_postgres(_test)
            _COLLECTED.append(_name)


def test_every_scenario_of_both_files_runs_here() -> None:
    """The scenarios found (a renamed file or a changed STORES list would silently drop them)."""
    assert len(_COLLECTED) == 7, _COLLECTED
    assert "test_the_intent_is_stored_before_the_tool_runs" in _COLLECTED
    assert "test_two_resumers_of_a_run_that_died_mid_tool_run_it_once" in _COLLECTED
