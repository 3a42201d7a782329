"""What the ``daimon`` command runs: agents from ``module:attr`` or agent files, tools, models.

The serving commands (``serve``, ``worker``, ``mcp serve``, ``a2a serve``) take anything
promptable at ``module:attr`` (:func:`load_promptable`): a Supervisor, a HandoffNetwork or a flow
as well as an Agent.

An agent file (YAML or TOML) describes an agent as data::

    name: calculator
    model: local:smollm2            # any model string; left out: the default model
    system_prompt: You compute.
    temperature: 0
    tools: [daimon.cli.demo:calculator]
    skills: [skills/]               # skill folders, relative to this file
    memory: {type: sliding_window, max_messages: 20}
    limits: {max_iterations: 5, max_tokens: 256, max_repeated_tool_calls: 3}
    rate_limits: {rpm: 500, itpm: 200000, otpm: 50000, concurrent: 20}  # store: redis://...
    model_settings: {top_p: 0.9}

Every problem is a :class:`ConfigError` whose message names the file and the field.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeGuard

from daimon.agent import Agent
from daimon.cli.limits import FIELDS as RATE_FIELDS
from daimon.cli.limits import rate_limits as checked_rate_limits
from daimon.core.errors import BuilderError
from daimon.core.limits import RateLimits
from daimon.core.optional import require
from daimon.core.protocols import Memory, Promptable
from daimon.memory import SlidingWindowMemory, TokenWindowMemory

__all__ = (
    "AgentConfig",
    "ConfigError",
    "DEFAULT_LOCAL_MODEL",
    "MemoryConfig",
    "PROVIDER_KEYS",
    "choose_model",
    "import_object",
    "is_agent_file",
    "load_agent_file",
    "load_agent_object",
    "load_promptable",
    "load_tool",
)

DEFAULT_LOCAL_MODEL = "local:smollm2"
"""The model used when no provider key is set: SmolLM2-135M-Instruct run in-process."""

PROVIDER_KEYS: tuple[tuple[str, str], ...] = (
    ("OPENAI_API_KEY", "openai:gpt-4o-mini"),
    ("ANTHROPIC_API_KEY", "anthropic:claude-sonnet-4-5"),
    ("GEMINI_API_KEY", "gemini:gemini-2.5-flash"),
    ("GOOGLE_API_KEY", "gemini:gemini-2.5-flash"),
)
"""Environment variable -> default model of that provider, in order of preference."""

_AGENT_FILE_SUFFIXES = (".yaml", ".yml", ".toml")


class ConfigError(BuilderError):
    """A bad agent file, agent path, tool path or model choice; the message says where."""


# ---------------------------------------------------------------------------- model choice
def choose_model(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The default model string and why it was chosen.

    ``DAIMON_MODEL`` wins; then the first provider whose API key is set (and whose module this
    version of daimon has); else the local model.
    """
    env = os.environ if environ is None else environ
    chosen = env.get("DAIMON_MODEL", "").strip()
    if chosen:
        return chosen, "DAIMON_MODEL is set"
    for variable, model in PROVIDER_KEYS:
        if env.get(variable) and _provider_available(model):
            return model, f"{variable} is set"
    return DEFAULT_LOCAL_MODEL, "no provider API key in the environment"


def _provider_available(model: str) -> bool:
    module = {"gemini": "daimon.models.gemini"}.get(model.partition(":")[0])
    return module is None or importlib.util.find_spec(module) is not None


# ---------------------------------------------------------------------------- import paths
def _ensure_cwd_on_path() -> None:
    # Like uvicorn: `daimon run --agent myagent:agent` finds myagent.py in the current folder.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def import_object(path: str, what: str) -> Any:
    """The object ``package.module:attribute`` names (dots allowed in the attribute).

    Raises:
        ConfigError: The path is malformed, the module does not import, or has no such name.
    """
    module_name, colon, attribute = path.partition(":")
    if not (colon and module_name and attribute):
        raise ConfigError(f"{what} {path!r} must look like 'package.module:name'")
    _ensure_cwd_on_path()
    try:
        value: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        raise ConfigError(f"cannot import {what} {path!r}: no module named {missing!r}") from None
    except Exception as exc:  # the module itself failed: say how, without a traceback
        raise ConfigError(f"cannot import {what} {path!r}: {type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ConfigError(
                f"cannot import {what} {path!r}: {module_name!r} has no attribute {attribute!r}"
            ) from None
    return value


def load_tool(path: str) -> Any:
    """A tool from ``package.module:function`` (a ``@tool`` or a plain function).

    Raises:
        ConfigError: It does not import, or is not callable.
    """
    value = import_object(path, "tool")
    if not callable(value) and not hasattr(value, "spec"):
        raise ConfigError(f"tool {path!r} is a {type(value).__name__}, not a function or tool")
    return value


def is_agent_file(spec: str) -> bool:
    """Whether ``--agent`` names a file (YAML/TOML) rather than ``module:attr``."""
    return spec.lower().endswith(_AGENT_FILE_SUFFIXES) or Path(spec).is_file()


def load_agent_object(path: str) -> Agent:
    """The :class:`Agent` at ``module:attr``, or returned by the function there.

    Raises:
        ConfigError: It does not import, or is not an agent.
    """
    value = import_object(path, "agent")
    if not isinstance(value, Agent) and callable(value):
        try:
            value = value()
        except BuilderError as exc:
            raise ConfigError(f"agent factory {path!r} failed: {exc}") from None
    if not isinstance(value, Agent):
        raise ConfigError(f"{path!r} is a {type(value).__name__}, not a daimon Agent")
    return value


def load_promptable(path: str) -> Promptable:
    """What ``module:attr`` names, or the function there returns: anything that can be prompted.

    An :class:`Agent`, a ``Supervisor``, a ``HandoffNetwork``, a graph, DAG or workflow (made a
    :class:`~daimon.orchestration.PromptableFlow` with its defaults), a ``ServedFlow``, or any
    :class:`~daimon.core.protocols.Promptable` of your own.

    Raises:
        ConfigError: It does not import, is not promptable, or a flow cannot take a prompt as
            its input (a workflow of several input fields: wrap it in ``PromptableFlow``).
    """
    from daimon.orchestration import Dag, Graph, PromptableFlow, Workflow

    value = import_object(path, "agent")
    if not _is_promptable(value) and callable(value):
        try:
            value = value()
        except BuilderError as exc:
            raise ConfigError(f"agent factory {path!r} failed: {exc}") from None
    if isinstance(value, (Graph, Dag, Workflow)):
        try:
            value = PromptableFlow(value)
        except BuilderError as exc:
            raise ConfigError(f"{path!r}: {exc}") from None
    if not _is_promptable(value):
        raise ConfigError(
            f"{path!r} is a {type(value).__name__}, not a daimon Agent (nor a Supervisor, "
            "HandoffNetwork, flow or other promptable)"
        )
    return value


def _is_promptable(value: object) -> TypeGuard[Promptable]:
    return (
        not isinstance(value, type)
        and isinstance(value, Promptable)
        and isinstance(getattr(value, "name", None), str)
    )


# ---------------------------------------------------------------------------- agent files
@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryConfig:
    """Where a chat's history lives."""

    type: str = "sliding_window"
    """``sliding_window``, ``token_window``, ``sqlite`` or ``redis``."""
    max_messages: int = 50
    """``sliding_window``: the most messages kept."""
    max_tokens: int = 4000
    """``token_window``: the most tokens kept (estimated)."""
    path: str = "daimon-memory.db"
    """``sqlite``: the database file."""
    url: str = "redis://localhost:6379/0"
    """``redis``: the server."""

    def build(self) -> Memory:
        """The memory this configuration describes."""
        if self.type == "sliding_window":
            return SlidingWindowMemory(self.max_messages)
        if self.type == "token_window":
            return TokenWindowMemory(SlidingWindowMemory(10_000), self.max_tokens)
        memory: Memory
        if self.type == "sqlite":
            memory = importlib.import_module("daimon.memory.sqlite").SQLiteMemory(self.path)
        else:
            memory = importlib.import_module("daimon.memory.redis").RedisMemory.from_url(self.url)
        return memory


_MEMORY_TYPES = ("sliding_window", "token_window", "sqlite", "redis")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentConfig:
    """An agent file, checked."""

    source: str
    """The file it came from."""
    name: str = "agent"
    model: str | None = None
    """A model string; ``None``: the default model."""
    system_prompt: str | None = None
    temperature: float | None = None
    tools: tuple[str, ...] = ()
    """Tools by import path, ``package.module:function``."""
    skills: tuple[str, ...] = ()
    """Folders of skills (or single skills), resolved against the agent file's folder."""
    memory: MemoryConfig | None = None
    max_iterations: int = 10
    max_tokens: int | None = None
    max_repeated_tool_calls: int | None = 3
    """How often one identical call may return the same result; ``None`` (``false``): no limit."""
    rate_limits: RateLimits | None = None
    """Shared rate limits for the agent's model calls (:mod:`daimon.cli.limits`)."""
    rate_limits_store: str | None = None
    """Where ``rate_limits`` are kept (a URL); ``None``: in the process."""
    model_settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


_TOP_FIELDS = (
    "name",
    "model",
    "system_prompt",
    "temperature",
    "tools",
    "skills",
    "memory",
    "limits",
    "rate_limits",
    "model_settings",
)
_LIMIT_FIELDS = ("max_iterations", "max_tokens", "max_repeated_tool_calls")
_MEMORY_FIELDS = ("type", "max_messages", "max_tokens", "path", "url")


class _Checker:
    """Reads typed fields out of parsed data, naming the field in every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str) -> ConfigError:
        return ConfigError(f"agent file {self.source!r}: {message}")

    def table(self, data: Any, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            raise self.fail(f"{where} must be a table of fields, got {_kind(data)}")
        for key in data:
            if key not in allowed:
                prefix = f"{where}." if where != "the file" else ""
                raise self.fail(
                    f"unknown field {prefix}{key!s} (known fields: {', '.join(allowed)})"
                )
        return dict(data)

    def string(self, data: Mapping[str, Any], key: str, where: str = "") -> str | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"{where}{key} must be a non-empty string, got {_kind(value)}")
        return value

    def positive_int(self, data: Mapping[str, Any], key: str, where: str = "") -> int | None:
        value = data.get(key)
        if value is None:
            return None
        if type(value) is not int or value < 1:
            raise self.fail(f"{where}{key} must be a positive integer, got {value!r}")
        return value

    def number(self, data: Mapping[str, Any], key: str) -> float | None:
        value = data.get(key)
        if value is None:
            return None
        if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
            raise self.fail(f"{key} must be a non-negative number, got {value!r}")
        return float(value)


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    return {dict: "a table", list: "a list", bool: repr(value)}.get(
        type(value), type(value).__name__
    )


def _parse(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"agent file {str(path)!r} is not valid TOML: {exc}") from None
    yaml = require("yaml", extra="cli")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"agent file {str(path)!r} is not valid YAML: {exc}") from None


def _memory(check: _Checker, value: Any) -> MemoryConfig:
    raw = check.table(value, "memory", _MEMORY_FIELDS)
    kind = check.string(raw, "type", "memory.") or "sliding_window"
    if kind not in _MEMORY_TYPES:
        raise check.fail(f"memory.type must be one of {', '.join(_MEMORY_TYPES)}, got {kind!r}")
    return MemoryConfig(
        type=kind,
        max_messages=check.positive_int(raw, "max_messages", "memory.") or 50,
        max_tokens=check.positive_int(raw, "max_tokens", "memory.") or 4000,
        path=check.string(raw, "path", "memory.") or "daimon-memory.db",
        url=check.string(raw, "url", "memory.") or "redis://localhost:6379/0",
    )


def _rate_limits(check: _Checker, value: Any) -> tuple[RateLimits, str | None]:
    """``rate_limits``: the limits (short names, as ``--limits`` takes them) and the store."""
    raw = check.table(value, "rate_limits", (*RATE_FIELDS, "store"))
    store = check.string(raw, "store", "rate_limits.")
    raw.pop("store", None)
    try:
        return checked_rate_limits(raw), store
    except BuilderError as exc:
        raise check.fail(f"rate_limits: {exc}") from None


def _skill_folders(check: _Checker, value: Any, base: Path) -> tuple[str, ...]:
    """``skills``: a folder or a list of folders, each made absolute against ``base``."""
    folders = [value] if isinstance(value, str) else value
    if not isinstance(folders, list) or not all(isinstance(f, str) and f for f in folders):
        raise check.fail("skills must be a folder or a list of folders (skills/)")
    return tuple(str(base / Path(folder).expanduser()) for folder in folders)


def load_agent_file(path: str | os.PathLike[str]) -> AgentConfig:
    """Read and check a YAML (``.yaml``/``.yml``) or TOML (``.toml``) agent file.

    Raises:
        ConfigError: The file is missing, does not parse, or has a bad or unknown field.
    """
    file = Path(path)
    source = os.fspath(path)
    if not file.is_file():
        raise ConfigError(f"agent file not found: {source!r}")
    if file.suffix.lower() not in _AGENT_FILE_SUFFIXES:
        raise ConfigError(f"agent file {source!r} must end in .yaml, .yml or .toml")
    check = _Checker(source)
    data = check.table(_parse(file), "the file", _TOP_FIELDS)

    tools_value = data.get("tools", [])
    if not isinstance(tools_value, list) or not all(isinstance(t, str) for t in tools_value):
        raise check.fail("tools must be a list of import paths ('package.module:function')")
    for index, tool_path in enumerate(tools_value):
        if tool_path.count(":") != 1:
            raise check.fail(
                f"tools[{index}] {tool_path!r} must look like 'package.module:function'"
            )

    limits = check.table(data.get("limits", {}), "limits", _LIMIT_FIELDS)
    memory = _memory(check, data["memory"]) if "memory" in data else None
    rates, store = (
        _rate_limits(check, data["rate_limits"]) if "rate_limits" in data else (None, None)
    )
    settings = data.get("model_settings", {})
    if not isinstance(settings, Mapping):
        raise check.fail(f"model_settings must be a table, got {_kind(settings)}")
    return AgentConfig(
        source=source,
        name=check.string(data, "name") or "agent",
        model=check.string(data, "model"),
        system_prompt=check.string(data, "system_prompt"),
        temperature=check.number(data, "temperature"),
        tools=tuple(tools_value),
        skills=_skill_folders(check, data.get("skills", []), file.parent),
        memory=memory,
        max_iterations=check.positive_int(limits, "max_iterations", "limits.") or 10,
        max_tokens=check.positive_int(limits, "max_tokens", "limits."),
        max_repeated_tool_calls=(
            None  # TOML has no null: false turns the guard off
            if limits.get("max_repeated_tool_calls") is False
            else check.positive_int(limits, "max_repeated_tool_calls", "limits.") or 3
        ),
        rate_limits=rates,
        rate_limits_store=store,
        model_settings=MappingProxyType(dict(settings)),
    )
