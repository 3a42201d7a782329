"""Optional dependencies: a missing extra is named, and the extras table is consistent."""

from __future__ import annotations

import importlib
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from daimon.core import MissingDependencyError
from daimon.core.errors import DISTRIBUTION
from daimon.core.optional import require

from .boundary import NOT_IN_ALL

ROOT = Path(__file__).resolve().parents[2]


def _extras() -> dict[str, list[str]]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        extras: dict[str, list[str]] = tomllib.load(f)["project"]["optional-dependencies"]
    return extras


def _self_references(requirements: list[str]) -> set[str]:
    """Extras named by ``daimon-agents[a,b]`` entries."""
    named: set[str] = set()
    for requirement in requirements:
        match = re.fullmatch(r"\s*daimon-agents\s*\[([^\]]*)\]\s*", requirement)
        if match:
            named |= {name.strip() for name in match.group(1).split(",") if name.strip()}
    return named


def test_blocked_library_names_its_extra(block_imports: Callable[..., None]) -> None:
    block_imports("openai")
    with pytest.raises(MissingDependencyError) as caught:
        require("openai", extra="openai")
    error = caught.value
    assert 'pip install "daimon-agents[openai]"' in str(error)
    assert error.extra == "openai"
    assert isinstance(error.__cause__, ImportError)
    with pytest.raises(ImportError):  # the blocker really blocks
        importlib.import_module("openai")


def test_blocking_an_imported_library(block_imports: Callable[..., None]) -> None:
    import wave  # loaded before the block: the fixture must take it out of sys.modules

    assert wave
    block_imports("wave")
    with pytest.raises(MissingDependencyError, match=r"daimon-agents\[wave-extra\]"):
        require("wave", extra="wave-extra")


def test_the_library_is_back_after_the_blocking_test() -> None:
    assert require("wave", extra="wave-extra").__name__ == "wave"


def test_all_names_only_existing_extras() -> None:
    extras = _extras()
    in_all = _self_references(extras["all"])
    assert in_all, "daimon-agents[all] should be written as daimon-agents[extra,extra,...]"
    unknown = in_all - set(extras)
    assert not unknown, f"daimon-agents[all] names extras that do not exist: {sorted(unknown)}"


def test_every_integration_extra_is_in_all() -> None:
    extras = _extras()
    left_out = set(extras) - _self_references(extras["all"]) - NOT_IN_ALL
    assert not left_out, (
        f"add to daimon-agents[all] (or to NOT_IN_ALL with a reason): {sorted(left_out)}"
    )


def test_extras_reference_only_existing_extras() -> None:
    # dev (and any other aggregate) may name extras too: each must exist.
    extras = _extras()
    for name, requirements in extras.items():
        unknown = _self_references(requirements) - set(extras)
        assert not unknown, f"daimon-agents[{name}] names unknown extras {sorted(unknown)}"


def test_the_distribution_is_daimon_agents_and_no_extra_names_the_other_daimon() -> None:
    # `daimon` on PyPI is an unrelated project: a `daimon[...]` requirement would install it.
    with (ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    assert project["name"] == DISTRIBUTION == "daimon-agents"
    for name, requirements in project["optional-dependencies"].items():
        wrong = [r for r in requirements if re.match(r"\s*daimon\s*(\[|$|[<>=!~;])", r)]
        assert not wrong, f"{name} requires the unrelated PyPI project `daimon`: {wrong}"
