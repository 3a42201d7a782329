"""``daimon eval``: run a dataset through an agent and gate CI on the pass rate."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import TextIO

from daimon.core.errors import BuilderError, MissingDependencyError, SerializationError
from daimon.core.protocols import Model
from daimon.eval._dataset import DatasetError, load_dataset
from daimon.eval._progress import console_progress
from daimon.eval._report import EvalReport, compare_reports
from daimon.eval._runner import EvalRunner, Promptable
from daimon.eval._scenario import EvalScenario

__all__ = ("EXIT_BELOW_THRESHOLD", "EXIT_OK", "EXIT_USAGE", "run_eval_cli")

EXIT_OK = 0
"""The pass rate reached the threshold (and nothing regressed against the baseline)."""
EXIT_BELOW_THRESHOLD = 1
"""The pass rate fell below the threshold, or a scenario regressed against the baseline."""
EXIT_USAGE = 2
"""A bad dataset, threshold, report path or baseline: nothing ran."""

_REPORT_SUFFIXES = (".json", ".md", ".markdown", ".html", ".htm")


def run_eval_cli(
    dataset_path: str | os.PathLike[str],
    agent: Promptable,
    *,
    threshold: float = 1.0,
    report_path: str | os.PathLike[str] | None = None,
    concurrency: int = 4,
    baseline_path: str | os.PathLike[str] | None = None,
    judge: Model | str | None = None,
    timeout: float | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``dataset_path`` through ``agent``; the process exit code, for CI gating.

    Progress goes to ``stderr`` (a rich bar on a terminal), the Markdown report to ``stdout``.
    Call it from synchronous code (it runs its own event loop).

    Args:
        dataset_path: A ``.yaml``, ``.jsonl`` or ``.json`` dataset.
        agent: What to evaluate.
        threshold: The lowest passing pass rate, from 0 to 1.
        report_path: Also save the report here (``.json``, ``.md`` or ``.html``).
        concurrency: Scenarios running at once.
        baseline_path: A JSON report to compare with: any regression fails the run.
        judge: The model for ``judge`` expectations.
        timeout: Seconds each scenario's run may take.
        stdout: Where the report goes (standard output by default).
        stderr: Where progress and errors go (standard error by default).

    Returns:
        ``0`` (:data:`EXIT_OK`), ``1`` (:data:`EXIT_BELOW_THRESHOLD`: too few passed, or a
        regression) or ``2`` (:data:`EXIT_USAGE`: nothing ran).
    """
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    try:
        _check_settings(threshold, report_path)
        scenarios, baseline = _load(dataset_path, baseline_path, judge)
        try:
            runner = EvalRunner(
                agent, concurrency=concurrency, timeout=timeout, progress=console_progress(err)
            )
        except BuilderError as exc:  # a bad concurrency or timeout, or not an agent
            raise _UsageError(str(exc)) from None
        report = asyncio.run(runner.run(scenarios))
        code = _gate(report, baseline, threshold, out, err)
        if report_path is not None:
            _save(report, report_path)
    except _UsageError as exc:
        print(f"daimon eval: {exc}", file=err)
        return EXIT_USAGE
    return code


class _UsageError(Exception):
    """A bad argument, dataset or file: the command exits with :data:`EXIT_USAGE`."""


def _check_settings(threshold: float, report_path: str | os.PathLike[str] | None) -> None:
    """Reject a bad threshold or report format, or a call from inside an event loop."""
    if not (isinstance(threshold, int | float) and 0.0 <= threshold <= 1.0):
        raise _UsageError(f"the threshold must be between 0 and 1, got {threshold!r}")
    if report_path is not None and Path(report_path).suffix.lower() not in _REPORT_SUFFIXES:
        raise _UsageError(
            f"cannot tell the report format of {str(report_path)!r}: use .json, .md or .html"
        )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise _UsageError("run_eval_cli() cannot run inside an event loop: use EvalRunner")


def _load(
    dataset_path: str | os.PathLike[str],
    baseline_path: str | os.PathLike[str] | None,
    judge: Model | str | None,
) -> tuple[list[EvalScenario], EvalReport | None]:
    """The dataset's scenarios and the baseline report, if any."""
    try:
        scenarios = load_dataset(dataset_path, judge=judge)
        baseline = EvalReport.load(baseline_path) if baseline_path is not None else None
    except (DatasetError, MissingDependencyError, SerializationError) as exc:
        raise _UsageError(str(exc)) from None
    except OSError as exc:
        message = f"cannot read the baseline {str(baseline_path)!r}: {exc.strerror or exc}"
        raise _UsageError(message) from None
    return scenarios, baseline


def _gate(
    report: EvalReport,
    baseline: EvalReport | None,
    threshold: float,
    out: TextIO,
    err: TextIO,
) -> int:
    """Print the report (and the comparison with the baseline); the exit code they give."""
    print(report.to_markdown(), file=out)
    code = EXIT_OK if report.pass_rate >= threshold else EXIT_BELOW_THRESHOLD
    if baseline is not None:
        comparison = compare_reports(baseline, report)
        print(comparison.to_markdown(), file=out)
        if not comparison.ok:
            code = EXIT_BELOW_THRESHOLD
    if code != EXIT_OK and report.pass_rate < threshold:
        print(
            f"daimon eval: pass rate {report.pass_rate:.0%} is below the threshold {threshold:.0%}",
            file=err,
        )
    return code


def _save(report: EvalReport, report_path: str | os.PathLike[str]) -> None:
    try:
        report.save(report_path)
    except OSError as exc:
        message = f"cannot write the report {str(report_path)!r}: {exc.strerror or exc}"
        raise _UsageError(message) from None
