"""Evaluate agents: scenarios with expectations, run concurrently, scored and reported.

* :class:`EvalScenario`: an input and what its answer must satisfy, as :class:`Scorer` s
  (:class:`Contains`, :class:`Regex`, :class:`Exact`, :class:`JsonSchema`, :class:`ToolCalled`,
  :class:`LLMJudge`, or a function made a scorer with :func:`scorer`);
* :class:`EvalRunner`: runs scenarios through an agent with a concurrency limit, timing, costing
  and scoring each one, and reporting progress (:func:`console_progress`);
* :func:`load_dataset`: scenarios from YAML (extra ``eval``), JSON Lines or JSON files;
* :class:`EvalReport`: JSON, Markdown and HTML reports; :func:`compare_reports` lists the
  regressions against a baseline;
* :func:`run_eval_cli`: the ``daimon eval`` command's work, returning its exit code for CI.

Example::

    runner = EvalRunner(agent, concurrency=8)
    report = await runner.run(load_dataset("evals/math.yaml"))
    report.save("report.md")
"""

from daimon.eval._cli import run_eval_cli
from daimon.eval._dataset import DatasetError, load_dataset
from daimon.eval._progress import console_progress
from daimon.eval._report import (
    EvalReport,
    EvalResult,
    Regression,
    ReportComparison,
    ScorerResult,
    compare_reports,
)
from daimon.eval._runner import EvalRunner, ProgressCallback, Promptable
from daimon.eval._scenario import EvalScenario
from daimon.eval._scorers import (
    Contains,
    EvalOutput,
    Exact,
    FunctionScorer,
    JsonSchema,
    LLMJudge,
    Regex,
    Score,
    ScoreFunction,
    Scorer,
    ToolCalled,
    scorer,
)

__all__ = (
    "Contains",
    "DatasetError",
    "EvalOutput",
    "EvalReport",
    "EvalResult",
    "EvalRunner",
    "EvalScenario",
    "Exact",
    "FunctionScorer",
    "JsonSchema",
    "LLMJudge",
    "ProgressCallback",
    "Promptable",
    "Regex",
    "Regression",
    "ReportComparison",
    "Score",
    "ScoreFunction",
    "Scorer",
    "ScorerResult",
    "ToolCalled",
    "compare_reports",
    "console_progress",
    "load_dataset",
    "run_eval_cli",
    "scorer",
)
