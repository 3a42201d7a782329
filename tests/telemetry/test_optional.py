"""Telemetry costs nothing when it is off: nothing imported, helpers that do nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import asyncio, json, sys
    baseline = set(sys.modules)

    import daimon
    import daimon.eval
    import daimon.telemetry
    from daimon import Agent, ChatResponse
    from daimon.eval import Contains, EvalRunner, EvalScenario
    from daimon.models import FunctionModel
    from daimon.telemetry import extract_trace_context, inject_trace_context

    agent = Agent(FunctionModel(lambda request: ChatResponse.reply("4")), name="a")
    carrier = inject_trace_context({})
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with extract_trace_context({"traceparent": traceparent}):
        text = asyncio.run(agent.prompt("2 + 2?")).text
    scenario = EvalScenario(name="s", input="?", expect=(Contains("4"),))
    report = asyncio.run(EvalRunner(agent).run([scenario]))
    print(json.dumps({
        "new": sorted(set(sys.modules) - baseline),
        "carrier": carrier,
        "text": text,
        "passed": report.passed,
    }))
    """
)

BLOCKED = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.partition(".")[0] in ("opentelemetry", "yaml", "rich"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    from daimon.core import MissingDependencyError
    from daimon.telemetry import extract_trace_context, inject_trace_context

    found = {"carrier": inject_trace_context({})}
    with extract_trace_context({"traceparent": "x"}):
        pass
    try:
        from daimon.telemetry import instrument
    except MissingDependencyError as exc:
        found["otel"] = [exc.extra, str(exc)]
    from daimon.eval import console_progress, load_dataset

    open("d.yaml", "w").write("- {input: hi}")
    try:
        load_dataset("d.yaml")
    except MissingDependencyError as exc:
        found["yaml"] = exc.extra
    try:
        console_progress(rich=True)
    except MissingDependencyError as exc:
        found["rich"] = exc.extra
    print(json.dumps(found))
    """
)


def _run(program: str, cwd: str | None = None) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=cwd
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return report


def test_telemetry_and_eval_import_no_optional_library_when_tracing_is_off() -> None:
    report = _run(PROBE)
    assert report["text"] == "4"
    assert report["passed"] == 1
    assert report["carrier"] == {}
    loaded = {name.partition(".")[0] for name in report["new"]}  # type: ignore[attr-defined]
    assert not loaded & {"opentelemetry", "yaml", "rich"}, sorted(loaded)


def test_a_missing_extra_is_named_and_the_propagation_helpers_still_work(tmp_path: object) -> None:
    report = _run(BLOCKED, cwd=str(tmp_path))
    assert report["carrier"] == {}
    extra, message = report["otel"]  # type: ignore[misc]
    assert extra == "otel"
    assert 'pip install "daimon-agents[otel]"' in message
    assert report["yaml"] == "eval"
    assert report["rich"] == "eval"
