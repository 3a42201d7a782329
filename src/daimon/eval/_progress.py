"""Progress of an eval run on a terminal: a rich progress bar, or one plain line per scenario."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, TextIO

from daimon.core.optional import require
from daimon.eval._report import EvalResult
from daimon.eval._runner import ProgressCallback

__all__ = ("console_progress",)


def console_progress(stream: TextIO | None = None, *, rich: bool | None = None) -> ProgressCallback:
    """A progress callback for :class:`~daimon.eval.EvalRunner` that writes to ``stream``.

    Args:
        stream: Where to write; standard error by default.
        rich: Draw a rich progress bar (``True``), or plain lines (``False``); by default, a bar
            when rich is installed and the stream is a terminal.
    """
    out = stream if stream is not None else sys.stderr
    if rich is None:
        rich = importlib.util.find_spec("rich") is not None and _isatty(out)
    return _RichProgress(out) if rich else _PlainProgress(out)


class _PlainProgress:
    __slots__ = ("_stream",)

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __call__(self, result: EvalResult, done: int, total: int) -> None:
        verdict = "PASS" if result.passed else "FAIL"
        width = len(str(total))
        line = (
            f"[{done:>{width}}/{total}] {verdict} {result.scenario} "
            f"(score {result.score:.2f}, {result.latency:.2f}s)"
        )
        for failure in result.failures:
            line += f"\n    {failure}"
        print(line, file=self._stream, flush=True)


class _RichProgress:
    """A bar over the scenarios, opened at the first result and closed at the last."""

    __slots__ = ("_bar", "_progress", "_stream")

    def __init__(self, stream: TextIO) -> None:
        require("rich", extra="eval")
        self._stream = stream
        self._progress: Any = None
        self._bar: Any = None

    def __call__(self, result: EvalResult, done: int, total: int) -> None:
        if self._progress is None:
            console = require("rich.console", extra="eval").Console(file=self._stream)
            self._progress = require("rich.progress", extra="eval").Progress(
                *_columns(), console=console, transient=False
            )
            self._progress.start()
            self._bar = self._progress.add_task("eval", total=total)
        progress = self._progress
        if not result.passed:
            reasons = "; ".join(result.failures)
            text = require("rich.text", extra="eval").Text  # plain text: names are not markup
            progress.console.print(text.assemble(("FAIL", "red"), f" {result.scenario}: {reasons}"))
        progress.update(self._bar, completed=done, description=f"eval ({done}/{total})")
        if done >= total:
            progress.stop()
            self._progress = None


def _columns() -> tuple[Any, ...]:
    progress = require("rich.progress", extra="eval")
    return (
        progress.TextColumn("{task.description}"),
        progress.BarColumn(),
        progress.MofNCompleteColumn(),
        progress.TimeElapsedColumn(),
    )


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
