"""The official MCP conformance suite against daimon's MCP server and client.

``@modelcontextprotocol/conformance`` (pinned in ``package.json`` here, installed with Node.js 22
by ``./scripts/mcp-conformance-setup``) runs every server scenario against ``server_app.py`` and
every client scenario against ``client_app.py``, with ``--expected-failures baseline.yml``: the
suite exits 0 only when exactly the baseline's scenarios fail. So a regression fails these tests,
and so does a scenario that starts passing until its baseline line goes. The score is printed
and written to ``test-artifacts/mcp-conformance/score.json``.

Without the suite installed the tests skip on a laptop and FAIL when ``CI`` is set, like the
``service`` marker of tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="needs the mcp extra")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
BASELINE = HERE / "baseline.yml"
SERVER_APP = HERE / "server_app.py"
CLIENT_APP = HERE / "client_app.py"
CLIENT_LAUNCHER = HERE / "client_launcher.py"
ARTIFACTS = ROOT / "test-artifacts" / "mcp-conformance"
SUITE_VERSION = "0.1.16"
CLIENT_TIMEOUT_MS = 60_000  # per client scenario; generous for a loaded machine

# The client scenarios: each group's suite runs its scenarios in parallel, a few groups at a
# time. sse-retry runs alone, last: it times the client's reconnection (500 ms, +200 ms).
CLIENT_GROUPS: tuple[tuple[str, ...], ...] = (
    ("--suite", "auth"),
    ("--suite", "backcompat"),
    ("--suite", "draft"),
    ("--suite", "extensions"),
    ("--scenario", "initialize"),
    ("--scenario", "tools_call"),
    ("--scenario", "elicitation-sep1034-client-defaults"),
)
TIMED_CLIENT_GROUPS: tuple[tuple[str, ...], ...] = (("--scenario", "sse-retry"),)


@dataclass(frozen=True)
class Suite:
    """The installed conformance suite."""

    node: Path
    cli: Path

    def command(self, *args: str) -> list[str]:
        return [str(self.node), str(self.cli), *args]

    def run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "NO_COLOR": "1"},
            check=False,
        )


def _install_dir() -> Path:
    """Where ./scripts/mcp-conformance-setup installs (the same rule as the script)."""
    configured = os.environ.get("DAIMON_MCP_CONFORMANCE_DIR")
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "daimon" / "mcp-conformance"


def _pinned_hash() -> str:
    pinned = (HERE / "package.json").read_bytes() + (HERE / "package-lock.json").read_bytes()
    return hashlib.sha256(pinned).hexdigest()


def _missing(reason: str) -> None:
    message = (
        f"the MCP conformance suite is not installed: {reason} "
        "(run ./scripts/mcp-conformance-setup)"
    )
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI is set: a missing suite is a failure", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def suite() -> Suite:
    """The suite installed by the setup script, at the pinned versions."""
    directory = _install_dir()
    stamp = directory / ".installed"
    if not stamp.is_file():
        _missing(f"nothing at {directory}")
    if stamp.read_text().strip() != _pinned_hash():
        _missing(f"{directory} holds other versions than tests/mcp/conformance pins")
    found = Suite(
        node=directory / "node_modules" / ".bin" / "node",
        cli=directory
        / "node_modules"
        / "@modelcontextprotocol"
        / "conformance"
        / "dist"
        / "index.js",
    )
    version = subprocess.run(
        found.command("--version"), capture_output=True, text=True, timeout=60, check=False
    )
    if version.returncode != 0 or version.stdout.strip() != SUITE_VERSION:
        _missing(f"{found.cli} does not run as version {SUITE_VERSION}: {version.stderr.strip()}")
    return found


def _listed(suite: Suite) -> dict[str, set[str]]:
    """Every scenario the suite knows, by side: ``conformance list``."""
    out = suite.run("list", timeout=60)
    assert out.returncode == 0, out.stderr
    side, found = "", {"server": set[str](), "client": set[str]()}
    for line in out.stdout.splitlines():
        if line.startswith(("Server scenarios", "Client scenarios")):
            side = line.split()[0].lower()
        elif line.strip().startswith("- ") and side:
            found[side].add(line.strip()[2:].split()[0])
    return found


_TIMESTAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def _results(directory: Path, prefix: str = "") -> dict[str, bool]:
    """Each scenario's outcome in the suite's ``-o`` directory: passed = no failure, no warning.

    The same rule as the suite's ``--expected-failures`` check (a warning fails a scenario).
    """
    outcome: dict[str, bool] = {}
    for checks_file in directory.rglob("checks.json"):
        name = _TIMESTAMP.sub("", checks_file.parent.relative_to(directory).as_posix())
        name = name.removeprefix(prefix)
        statuses = {check["status"] for check in json.loads(checks_file.read_text())}
        outcome[name] = not statuses & {"FAILURE", "WARNING"}
    return outcome


def _record(side: str, outcome: dict[str, bool]) -> str:
    passed = sorted(name for name, ok in outcome.items() if ok)
    score = (
        f"{side} {len(passed)}/{len(outcome)} on @modelcontextprotocol/conformance {SUITE_VERSION}"
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "score.json"
    recorded = json.loads(path.read_text()) if path.is_file() else {}
    recorded[side] = {
        "suite": SUITE_VERSION,
        "passed": len(passed),
        "total": len(outcome),
        "passing": passed,
        "failing": sorted(name for name, ok in outcome.items() if not ok),
    }
    path.write_text(json.dumps(recorded, indent=2) + "\n")
    print(score)
    return score


def _report(runs: list[subprocess.CompletedProcess[str]]) -> str:
    return "\n\n".join(
        f"$ {' '.join(map(str, run.args[2:]))}\nexit {run.returncode}\n"
        + "\n".join((run.stdout + run.stderr).splitlines()[-40:])
        for run in runs
    )


@contextlib.contextmanager
def _started(*args: str, expect: str) -> Iterator[str]:
    """A Python program of this folder, running until the block ends (its stdin closes).

    Yields the first line it prints, which must start with ``expect``.
    """
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            ready, _, _ = select.select([process.stdout], [], [], 60)
            first = process.stdout.readline().strip() if ready else ""
            if not first.startswith(expect):
                errors.seek(0)
                pytest.fail(f"{args[0]} did not start: {errors.read()}", pytrace=False)
            yield first
        finally:
            process.stdin.close()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.stdout.close()


@pytest.fixture
def server_url() -> Iterator[str]:
    """server_app.py serving on a free port."""
    with _started(str(SERVER_APP), expect="http://") as url:
        yield url


@pytest.fixture
def client_command() -> Iterator[str]:
    """The client command for the suite: the launcher, handing scenarios to client_app.py."""
    with tempfile.TemporaryDirectory(prefix="daimon-mcp-") as directory:
        path = os.path.join(directory, "client.sock")
        with _started(str(CLIENT_APP), "--serve", path, expect="ready"):
            # -S -I: the launcher needs only the standard library, so it starts in milliseconds.
            parts = (sys.executable, "-S", "-I", str(CLIENT_LAUNCHER), path)
            assert not any(" " in part for part in parts), "the suite splits its command on spaces"
            yield " ".join(parts)


@pytest.mark.timeout(300)
def test_server_scenarios(suite: Suite, server_url: str, tmp_path: Path) -> None:
    """Every server scenario (``--suite all``: 32) against server_app.py, against the baseline."""
    run = suite.run(
        "server",
        "--url",
        server_url,
        "--suite",
        "all",
        "--expected-failures",
        str(BASELINE),
        "-o",
        str(tmp_path),
        timeout=240,
    )
    outcome = _results(tmp_path, prefix="server-")
    score = _record("server", outcome)
    assert set(outcome) == _listed(suite)["server"], _report([run])
    assert run.returncode == 0, f"{score}\n{_report([run])}"


@pytest.mark.timeout(600)
def test_client_scenarios(suite: Suite, client_command: str, tmp_path: Path) -> None:
    """Every client scenario (26) against client_app.py, against the baseline."""

    def client(group: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        return suite.run(
            "client",
            "--command",
            client_command,
            *group,
            "--timeout",
            str(CLIENT_TIMEOUT_MS),
            "--expected-failures",
            str(BASELINE),
            "-o",
            str(tmp_path),
            timeout=CLIENT_TIMEOUT_MS / 1000 * 3,
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(client, CLIENT_GROUPS))
    runs += [client(group) for group in TIMED_CLIENT_GROUPS]
    outcome = _results(tmp_path)
    score = _record("client", outcome)
    assert set(outcome) == _listed(suite)["client"], _report(runs)
    failed = [run for run in runs if run.returncode != 0]
    assert not failed, f"{score}\n{_report(failed)}"
