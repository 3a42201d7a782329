"""The import-linter contracts in pyproject.toml hold, and name the boundary in boundary.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from .boundary import ALWAYS_INSTALLED, OPTIONAL_LIBRARIES, PLUGIN_FOLDERS

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports() -> str:
    # The venv's own binary, next to the interpreter running the tests.
    candidate = Path(sys.executable).with_name("lint-imports")
    found = str(candidate) if candidate.exists() else shutil.which("lint-imports")
    assert found, "lint-imports is not installed: pip install -e '.[dev]'"
    return found


def _importlinter() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        config: dict[str, Any] = tomllib.load(f)["tool"]["importlinter"]
    return config


def _contract(contract_id: str) -> dict[str, Any]:
    contracts = {c.get("id"): c for c in _importlinter()["contracts"]}
    return contracts[contract_id]


def _layer_names(layer: str) -> list[str]:
    return [part.strip().strip("()") for part in re.split(r"[|:]", layer)]


def test_import_contracts_hold() -> None:
    result = subprocess.run(
        [_lint_imports(), "--no-logo", "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"lint-imports failed:\n{output}"


def test_contracts_cover_every_rule() -> None:
    config = _importlinter()
    assert config["root_packages"] == ["daimon"]
    assert config["include_external_packages"] is True
    ids = {c.get("id") for c in config["contracts"]}
    assert {"core", "kit", "plugins", "independent-plugins", "no-optional-libraries"} <= ids


def test_optional_library_layer_matches_the_boundary() -> None:
    optional_layer, installed_layer = _contract("no-optional-libraries")["layers"]
    assert set(_layer_names(optional_layer)) == OPTIONAL_LIBRARIES
    assert _layer_names(installed_layer) == list(ALWAYS_INSTALLED)


def test_plugin_contracts_name_every_plugin_folder() -> None:
    assert _contract("independent-plugins")["modules"] == [f"{p}.*" for p in PLUGIN_FOLDERS]
    assert _contract("plugins")["source_modules"] == [f"{p}.**" for p in PLUGIN_FOLDERS]
    ignored = set(_contract("plugins")["ignore_imports"])
    for folder in PLUGIN_FOLDERS:
        assert {
            f"{folder}.** -> daimon.core",
            f"{folder}.** -> daimon.core.**",
            f"{folder}.** -> daimon.kit",
            f"{folder}.** -> daimon.kit.**",
            f"{folder}.** -> {folder}.**",
        } <= ignored


def _extras() -> dict[str, list[str]]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        extras: dict[str, list[str]] = tomllib.load(f)["project"]["optional-dependencies"]
    return extras


def _distribution(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def test_every_installed_extra_library_is_in_the_deny_list() -> None:
    # An extra's library that the always-installed part could import unnoticed would be a hole
    # in the contract: map each installed distribution to the names it can be imported by.
    top_level_by_distribution: dict[str, set[str]] = {}
    for top_level, distributions in metadata.packages_distributions().items():
        for distribution in distributions:
            key = _distribution(distribution)
            top_level_by_distribution.setdefault(key, set()).add(top_level)
    checked, missing = set[str](), set[str]()
    for extra, requirements in _extras().items():
        if extra == "dev":
            continue
        for requirement in requirements:
            distribution = _distribution(requirement)
            if distribution == "daimon":
                continue
            names = {
                n
                for n in top_level_by_distribution.get(distribution, set())
                if not n.startswith("_") and n.isidentifier()  # "x-stubs": typing only
            }
            checked |= names
            missing |= names - OPTIONAL_LIBRARIES
    assert not missing, f"add these import names to boundary.py and pyproject: {sorted(missing)}"
    if not checked:
        pytest.skip("no extra is installed, nothing to map")


def test_kit_contract_keeps_the_kit_beside_core() -> None:
    # The kit may import core only; core may import nothing else of daimon, the kit included.
    kit = _contract("kit")
    assert kit["source_modules"] == ["daimon.kit", "daimon.kit.**"]
    assert kit["forbidden_modules"] == ["daimon", "daimon.**"]
    assert set(kit["ignore_imports"]) == {
        "daimon.kit.** -> daimon.core",
        "daimon.kit.** -> daimon.core.**",
        "daimon.kit.** -> daimon.kit.**",
    }
    assert _contract("core")["forbidden_modules"] == ["daimon", "daimon.**"]
