"""Eval results and reports: JSON (to keep and compare), Markdown and HTML (to read)."""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from daimon.core.chat import Usage
from daimon.core.errors import SerializationError

__all__ = (
    "EvalReport",
    "EvalResult",
    "Regression",
    "ReportComparison",
    "ScorerResult",
    "compare_reports",
)

_FORMAT = "daimon.eval.report"
_VERSION = 1
_NO_METADATA: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class ScorerResult:
    """One scorer's verdict on one scenario."""

    name: str
    value: float
    passed: bool
    reason: str = ""
    error: str | None = None
    """What the scorer raised, when it failed rather than scored."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalResult:
    """How one scenario went."""

    scenario: str
    """The scenario's name."""
    input: str
    passed: bool
    score: float
    """The mean of the scorers' values (1.0 with no scorers; 0.0 when the run failed)."""
    latency: float
    """Seconds the run took."""
    cost: float = 0.0
    """Dollars, when the agent has a cost model."""
    usage: Usage = field(default_factory=Usage)
    output: str = ""
    """The answer's text."""
    scores: tuple[ScorerResult, ...] = ()
    error: str | None = None
    """Why the run failed (``Type: message``), when it did."""
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=lambda: _NO_METADATA)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON data."""
        return {
            "scenario": self.scenario,
            "input": self.input,
            "passed": self.passed,
            "score": self.score,
            "latency": self.latency,
            "cost": self.cost,
            "usage": {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
                "cached_tokens": self.usage.cached_tokens,
                "requests": self.usage.requests,
            },
            "output": self.output,
            "scores": [
                {
                    "name": s.name,
                    "value": s.value,
                    "passed": s.passed,
                    "reason": s.reason,
                    "error": s.error,
                }
                for s in self.scores
            ],
            "error": self.error,
            "tags": list(self.tags),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalResult:
        """Read a result written by :meth:`to_dict`."""
        usage = data.get("usage") or {}
        return cls(
            scenario=str(data["scenario"]),
            input=str(data.get("input", "")),
            passed=bool(data["passed"]),
            score=float(data["score"]),
            latency=float(data.get("latency", 0.0)),
            cost=float(data.get("cost", 0.0)),
            usage=Usage(**{k: int(v) for k, v in usage.items()}),
            output=str(data.get("output", "")),
            scores=tuple(
                ScorerResult(
                    name=str(s["name"]),
                    value=float(s["value"]),
                    passed=bool(s["passed"]),
                    reason=str(s.get("reason", "")),
                    error=s.get("error"),
                )
                for s in data.get("scores", ())
            ),
            error=data.get("error"),
            tags=tuple(data.get("tags", ())),
            metadata=dict(data.get("metadata") or {}),
        )

    @property
    def failures(self) -> list[str]:
        """Why the scenario failed, one line per problem (empty when it passed)."""
        lines = [f"run failed: {self.error}"] if self.error else []
        for s in self.scores:
            if s.error is not None:
                lines.append(f"{s.name}: scorer error: {s.error}")
            elif not s.passed:
                lines.append(f"{s.name}: {s.reason}" if s.reason else s.name)
        return lines


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalReport:
    """The results of an eval run, in scenario order, with totals."""

    name: str
    results: tuple[EvalResult, ...]
    created_at: str = ""
    """When the run started (ISO 8601, UTC)."""
    duration: float = 0.0
    """Wall-clock seconds of the whole run."""

    @property
    def total(self) -> int:
        """How many scenarios ran."""
        return len(self.results)

    @property
    def passed(self) -> int:
        """How many passed."""
        return sum(1 for r in self.results if r.passed)

    @property
    def failed(self) -> int:
        """How many failed."""
        return self.total - self.passed

    @property
    def pass_rate(self) -> float:
        """Passed over total (1.0 for an empty run)."""
        return self.passed / self.total if self.results else 1.0

    @property
    def mean_score(self) -> float:
        """The mean scenario score."""
        return _mean([r.score for r in self.results])

    @property
    def cost(self) -> float:
        """Dollars over every scenario."""
        return math.fsum(r.cost for r in self.results)

    @property
    def mean_latency(self) -> float:
        """Mean seconds per scenario."""
        return _mean([r.latency for r in self.results])

    @property
    def p95_latency(self) -> float:
        """The 95th percentile of seconds per scenario (nearest rank)."""
        latencies = sorted(r.latency for r in self.results)
        if not latencies:
            return 0.0
        return latencies[max(math.ceil(0.95 * len(latencies)) - 1, 0)]

    def result(self, scenario: str) -> EvalResult | None:
        """The result of the scenario named ``scenario``."""
        return next((r for r in self.results if r.scenario == scenario), None)

    def summary(self) -> dict[str, Any]:
        """The totals, as JSON data."""
        return {
            "total": self.total,
            "passed": self.passed,
            "failed": self.failed,
            "pass_rate": self.pass_rate,
            "mean_score": self.mean_score,
            "cost": self.cost,
            "mean_latency": self.mean_latency,
            "p95_latency": self.p95_latency,
        }

    # ------------------------------------------------------------------------------- JSON
    def to_json(self, *, indent: int | None = 2) -> str:
        """The report as JSON: everything, readable back with :meth:`from_json`."""
        data = {
            "format": _FORMAT,
            "version": _VERSION,
            "name": self.name,
            "created_at": self.created_at,
            "duration": self.duration,
            "summary": self.summary(),
            "results": [r.to_dict() for r in self.results],
        }
        return json.dumps(data, indent=indent, ensure_ascii=False, default=str)

    @classmethod
    def from_json(cls, text: str) -> EvalReport:
        """Read a report written by :meth:`to_json`.

        Raises:
            SerializationError: The text is not such a report.
        """
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != _FORMAT:
                raise ValueError("not a daimon eval report")
            if data.get("version") != _VERSION:
                raise ValueError(f"unsupported report version {data.get('version')!r}")
            return cls(
                name=str(data.get("name", "")),
                created_at=str(data.get("created_at", "")),
                duration=float(data.get("duration", 0.0)),
                results=tuple(EvalResult.from_dict(r) for r in data["results"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SerializationError(f"cannot read eval report: {exc}") from exc

    # --------------------------------------------------------------------------- Markdown
    def to_markdown(self) -> str:
        """The report as Markdown: the totals, then one row per scenario."""
        lines = [
            f"# Eval report: {_md(self.name)}",
            "",
            f"**{self.passed}/{self.total} passed** ({self.pass_rate:.0%}), "
            f"mean score {self.mean_score:.2f}, cost ${self.cost:.6f}, "
            f"latency mean {self.mean_latency:.2f}s / p95 {self.p95_latency:.2f}s",
            "",
            "| Scenario | Result | Score | Latency | Cost | Details |",
            "|---|---|---|---|---|---|",
        ]
        for r in self.results:
            verdict = "PASS" if r.passed else "FAIL"
            details = "<br>".join(_md(line) for line in r.failures)
            lines.append(
                f"| {_md(r.scenario)} | {verdict} | {r.score:.2f} | {r.latency:.2f}s "
                f"| ${r.cost:.6f} | {details} |"
            )
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------------------- HTML
    def to_html(self) -> str:
        """The report as a small standalone HTML page."""
        rows = "\n".join(
            "<tr class='{cls}'><td>{name}</td><td>{verdict}</td><td>{score:.2f}</td>"
            "<td>{latency:.2f}s</td><td>${cost:.6f}</td><td>{details}</td></tr>".format(
                cls="pass" if r.passed else "fail",
                name=html.escape(r.scenario),
                verdict="PASS" if r.passed else "FAIL",
                score=r.score,
                latency=r.latency,
                cost=r.cost,
                details="<br>".join(html.escape(line) for line in r.failures),
            )
            for r in self.results
        )
        title = html.escape(f"Eval report: {self.name}")
        return (
            "<!doctype html>\n<html><head><meta charset='utf-8'>"
            f"<title>{title}</title><style>"
            "body{font-family:sans-serif}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}"
            ".pass td:nth-child(2){color:#070}.fail td:nth-child(2){color:#b00}"
            f"</style></head><body><h1>{title}</h1>"
            f"<p><b>{self.passed}/{self.total} passed</b> ({self.pass_rate:.0%}), mean score "
            f"{self.mean_score:.2f}, cost ${self.cost:.6f}, latency mean "
            f"{self.mean_latency:.2f}s / p95 {self.p95_latency:.2f}s</p>"
            "<table><tr><th>Scenario</th><th>Result</th><th>Score</th><th>Latency</th>"
            f"<th>Cost</th><th>Details</th></tr>\n{rows}\n</table></body></html>\n"
        )

    # -------------------------------------------------------------------------- files
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the report; the suffix picks the format (``.json``, ``.md``, ``.html``).

        Raises:
            ValueError: Another suffix.
        """
        target = Path(path)
        render = {
            ".json": self.to_json,
            ".md": self.to_markdown,
            ".markdown": self.to_markdown,
            ".html": self.to_html,
            ".htm": self.to_html,
        }.get(target.suffix.lower())
        if render is None:
            raise ValueError(
                f"cannot tell the report format of {str(target)!r}: use .json, .md or .html"
            )
        target.write_text(render(), encoding="utf-8")
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EvalReport:
        """Read a JSON report saved by :meth:`save`."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Regression:
    """A scenario that got worse."""

    scenario: str
    reason: str
    """``now fails`` or ``score 0.90 -> 0.60``, plus the new failures."""
    before: EvalResult
    after: EvalResult


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportComparison:
    """What changed from a baseline report to a current one, scenario by scenario."""

    regressions: tuple[Regression, ...] = ()
    """Scenarios that passed and now fail, or whose score fell by more than the tolerance."""
    improvements: tuple[str, ...] = ()
    """Scenarios that failed and now pass."""
    removed: tuple[str, ...] = ()
    """In the baseline only."""
    added: tuple[str, ...] = ()
    """In the current report only."""

    @property
    def ok(self) -> bool:
        """Whether nothing regressed."""
        return not self.regressions

    def to_markdown(self) -> str:
        """The changes as Markdown."""
        lines = ["## Compared with the baseline", ""]
        if self.regressions:
            lines.append(f"**{len(self.regressions)} regression(s):**")
            lines += [f"- {_md(r.scenario)}: {_md(r.reason)}" for r in self.regressions]
        else:
            lines.append("No regressions.")
        for title, names in (
            ("Now passing", self.improvements),
            ("New scenarios", self.added),
            ("Scenarios no longer run", self.removed),
        ):
            if names:
                lines += ["", f"{title}: " + ", ".join(_md(n) for n in names)]
        return "\n".join(lines) + "\n"


def compare_reports(
    baseline: EvalReport, current: EvalReport, *, score_tolerance: float = 0.1
) -> ReportComparison:
    """The regressions (and improvements) of ``current`` against ``baseline``.

    A scenario regresses when it passed and now fails, or when its score fell by more than
    ``score_tolerance``. Scenarios are matched by name.
    """
    before = {r.scenario: r for r in baseline.results}
    after = {r.scenario: r for r in current.results}
    regressions: list[Regression] = []
    improvements: list[str] = []
    for name, now in after.items():
        was = before.get(name)
        if was is None:
            continue
        if was.passed and not now.passed:
            reason = "now fails"
        elif now.score < was.score - score_tolerance:
            reason = f"score {was.score:.2f} -> {now.score:.2f}"
        else:
            if now.passed and not was.passed:
                improvements.append(name)
            continue
        if now.failures:
            reason += ": " + "; ".join(now.failures)
        regressions.append(Regression(scenario=name, reason=reason, before=was, after=now))
    return ReportComparison(
        regressions=tuple(regressions),
        improvements=tuple(improvements),
        removed=tuple(n for n in before if n not in after),
        added=tuple(n for n in after if n not in before),
    )


def _mean(values: Sequence[float] | Iterable[float]) -> float:
    items = list(values)
    return math.fsum(items) / len(items) if items else 0.0


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
