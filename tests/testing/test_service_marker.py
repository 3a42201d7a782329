"""The ``service`` marker hook of ``tests/conftest.py``: skip outside CI, fail in CI."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).parents[1] / "conftest.py"


def _load_conftest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("daimon_tests_conftest_copy", CONFTEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _load_conftest()


class FakeItem:
    def __init__(self, *args: Any) -> None:
        self.marker = pytest.mark.service(*args).mark

    def iter_markers(self, name: str) -> list[pytest.Mark]:
        return [self.marker] if name == "service" else []


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_missing_service_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("DAIMON_TEST_REDIS_PORT", str(_closed_port()))
    with pytest.raises(pytest.skip.Exception, match="service 'redis' is not reachable"):
        hooks.pytest_runtest_setup(FakeItem("redis"))


def test_a_missing_service_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")
    monkeypatch.setenv("DAIMON_TEST_NATS_PORT", str(_closed_port()))
    with pytest.raises(pytest.fail.Exception, match="CI is set: a missing service is a failure"):
        hooks.pytest_runtest_setup(FakeItem("nats"))


@pytest.mark.parametrize("args", [("redsi",), (), ("redis", "nats")])
def test_a_malformed_marker_fails(args: tuple[str, ...]) -> None:
    with pytest.raises(pytest.fail.Exception, match="needs one of"):
        hooks.pytest_runtest_setup(FakeItem(*args))


@pytest.mark.service("redis")
def test_a_running_service_lets_the_test_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")
    hooks.pytest_runtest_setup(FakeItem("redis"))


def test_the_hook_is_active_in_a_real_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: in CI, a marked test whose service is down is reported as an error."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("DAIMON_TEST_REDIS_PORT", str(_closed_port()))
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makeini(
        "[pytest]\nmarkers =\n    service(name): needs a running service\n"
        "asyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.service("redis")
        def test_needs_redis():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*CI is set: a missing service is a failure*"])
