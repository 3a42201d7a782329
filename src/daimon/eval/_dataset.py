r"""Datasets of scenarios, from YAML, JSON Lines or JSON files.

A YAML file holds a list of scenarios (or a mapping with a ``scenarios`` list); a JSON Lines
file one scenario per line. Each scenario::

    - name: adds                      # unique; by default scenario-<n>
      input: What is 2 + 2?
      tags: [math]
      expect:
        contains: "4"                 # or a list: every one must appear
        regex: "\\b4\\b"
        exact: "4"
        json_schema: {type: object, required: [answer]}
        tool_called: {name: add, arguments: {a: 2, b: 2}}   # or just the tool's name
        judge: The answer is a single number.                # needs a judge model
        scorer: my_package.scorers:polite                    # a Scorer, or a scoring function

``expect`` may also be a list of such mappings, to use a kind more than once. Every mistake is a
:class:`DatasetError` naming the file, the scenario and the field.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from daimon.core.errors import BuilderError
from daimon.core.optional import require
from daimon.core.protocols import Model
from daimon.eval._scenario import EvalScenario
from daimon.eval._scorers import (
    Contains,
    Exact,
    FunctionScorer,
    JsonSchema,
    LLMJudge,
    Regex,
    Scorer,
    ToolCalled,
)

__all__ = ("DatasetError", "load_dataset")

_FIELDS = frozenset({"name", "input", "expect", "tags", "metadata"})


class DatasetError(BuilderError):
    """A dataset file that cannot be read; the message says where."""


def load_dataset(
    path: str | os.PathLike[str], *, judge: Model | str | None = None
) -> list[EvalScenario]:
    """The scenarios of a ``.yaml``/``.yml``, ``.jsonl`` or ``.json`` file.

    Args:
        path: The dataset file.
        judge: The model for ``judge`` expectations.

    Raises:
        DatasetError: The file is missing, malformed, or describes a scenario wrongly.
        MissingDependencyError: A YAML file without PyYAML installed (extra ``eval``).
    """
    source = Path(path)
    suffix = source.suffix.lower()
    if suffix not in (".yaml", ".yml", ".jsonl", ".json"):
        raise DatasetError(f"{source}: unknown dataset format; use .yaml, .yml, .jsonl or .json")
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"{source}: cannot read the dataset: {exc.strerror or exc}") from None
    entries: list[tuple[str, Any]]
    if suffix == ".jsonl":
        entries = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entries.append((f"{source}:{number}", json.loads(line)))
            except ValueError as exc:
                raise DatasetError(f"{source}:{number}: not JSON: {exc}") from None
    else:
        data = _parse_document(source, text, suffix)
        if isinstance(data, Mapping) and "scenarios" in data:
            data = data["scenarios"]
        if not isinstance(data, list):
            raise DatasetError(f"{source}: expected a list of scenarios (or 'scenarios: [...]')")
        entries = [(f"{source}: scenario {i + 1}", entry) for i, entry in enumerate(data)]
    scenarios: list[EvalScenario] = []
    seen: set[str] = set()
    for index, (where, entry) in enumerate(entries):
        scenario = _scenario(entry, index, where, judge)
        if scenario.name in seen:
            raise DatasetError(f"{where}: the name {scenario.name!r} is used twice")
        seen.add(scenario.name)
        scenarios.append(scenario)
    return scenarios


def _parse_document(source: Path, text: str, suffix: str) -> Any:
    if suffix == ".json":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise DatasetError(f"{source}: not JSON: {exc}") from None
    yaml = require("yaml", extra="eval")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DatasetError(f"{source}: not YAML: {exc}") from None


def _scenario(entry: Any, index: int, where: str, judge: Model | str | None) -> EvalScenario:
    if not isinstance(entry, Mapping):
        raise DatasetError(f"{where}: a scenario must be a mapping, got {type(entry).__name__}")
    unknown = set(entry) - _FIELDS
    if unknown:
        raise DatasetError(
            f"{where}: unknown field(s) {sorted(map(str, unknown))}; fields: {sorted(_FIELDS)}"
        )
    name = entry.get("name", f"scenario-{index + 1}")
    where = f"{where} ({name!r})" if "name" in entry else where
    if "input" not in entry or not isinstance(entry["input"], str):
        raise DatasetError(f"{where}: 'input' must be a string")
    raw = entry.get("expect")
    raw = [] if raw is None else raw
    items = [raw] if isinstance(raw, Mapping) else raw
    if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
        raise DatasetError(f"{where}: 'expect' must be a mapping or a list of mappings")
    expect: list[Scorer] = []
    for item in items:
        for kind, value in item.items():
            build = _KINDS.get(str(kind))
            if build is None:
                raise DatasetError(
                    f"{where}: unknown expectation {kind!r}; known: {sorted(_KINDS)}"
                )
            try:
                expect.extend(build(value, judge))
            except (BuilderError, TypeError, ValueError) as exc:
                raise DatasetError(f"{where}: expect.{kind}: {exc}") from None
    tags = entry.get("tags")
    tags = [] if tags is None else tags
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise DatasetError(f"{where}: 'tags' must be a list of strings")
    metadata = entry.get("metadata")
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, Mapping):
        raise DatasetError(f"{where}: 'metadata' must be a mapping")
    try:
        return EvalScenario(
            name=str(name),
            input=entry["input"],
            expect=tuple(expect),
            tags=tuple(tags),
            metadata=dict(metadata),
        )
    except BuilderError as exc:
        raise DatasetError(f"{where}: {exc}") from None


def _strings(value: Any, what: str) -> list[str]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) for v in values):
        raise DatasetError(f"must be {what} or a list of them")
    return values


def _contains(value: Any, judge: Model | str | None) -> list[Scorer]:
    return [Contains(text) for text in _strings(value, "a string")]


def _regex(value: Any, judge: Model | str | None) -> list[Scorer]:
    return [Regex(pattern) for pattern in _strings(value, "a pattern")]


def _exact(value: Any, judge: Model | str | None) -> list[Scorer]:
    return [Exact(text) for text in _strings(value, "a string")]


def _json_schema(value: Any, judge: Model | str | None) -> list[Scorer]:
    if not isinstance(value, Mapping):
        raise DatasetError("must be a JSON schema (a mapping)")
    return [JsonSchema(value)]


def _tool_called(value: Any, judge: Model | str | None) -> list[Scorer]:
    scorers: list[Scorer] = []
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str):
            scorers.append(ToolCalled(item))
            continue
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise DatasetError("must be a tool name or {name, arguments, exact}")
        extra = set(item) - {"name", "arguments", "exact"}
        if extra:
            raise DatasetError(f"unknown key(s) {sorted(map(str, extra))}")
        arguments = item.get("arguments")
        if arguments is not None and not isinstance(arguments, Mapping):
            raise DatasetError("'arguments' must be a mapping")
        scorers.append(ToolCalled(item["name"], arguments, exact=bool(item.get("exact", False))))
    return scorers


def _judge(value: Any, judge: Model | str | None) -> list[Scorer]:
    if judge is None:
        raise DatasetError("needs a judge model: load_dataset(..., judge=model)")
    if isinstance(value, str):
        return [LLMJudge(judge, value)]
    if not isinstance(value, Mapping) or not isinstance(value.get("criteria"), str):
        raise DatasetError("must be the criteria, or {criteria, threshold}")
    return [LLMJudge(judge, value["criteria"], threshold=float(value.get("threshold", 0.5)))]


def _scorer(value: Any, judge: Model | str | None) -> list[Scorer]:
    scorers: list[Scorer] = []
    for path in _strings(value, "an import path 'module:name'"):
        module_name, colon, attribute = path.partition(":")
        if not colon or not module_name or not attribute:
            raise DatasetError(f"{path!r} is not an import path 'module:name'")
        try:
            found: Any = importlib.import_module(module_name)
            for part in attribute.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError) as exc:
            raise DatasetError(f"cannot import {path!r}: {exc}") from None
        if isinstance(found, Scorer):
            scorers.append(found)
        elif callable(found):
            scorers.append(FunctionScorer(found, name=attribute))
        else:
            raise DatasetError(f"{path!r} is neither a Scorer nor a function")
    return scorers


_KINDS: dict[str, Callable[[Any, Model | str | None], Sequence[Scorer]]] = {
    "contains": _contains,
    "regex": _regex,
    "exact": _exact,
    "json_schema": _json_schema,
    "tool_called": _tool_called,
    "judge": _judge,
    "scorer": _scorer,
}
