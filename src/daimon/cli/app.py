"""The ``daimon`` command: ``daimon run "prompt"`` and ``daimon chat``.

Exit codes, for scripts:

* ``0``: the run finished (``chat``: the session ended with ``/exit`` or end of input);
* ``1``: the run failed (the model or provider failed, too many iterations, a guardrail, ...);
* ``2``: a usage or configuration error (a bad option, agent file, tool path, model string or
  model file, a missing extra); nothing ran;
* ``130``: interrupted with Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from daimon.agent import Agent
from daimon.cli.db import db_app
from daimon.cli.loading import (
    AgentConfig,
    ConfigError,
    choose_model,
    is_agent_file,
    load_agent_file,
    load_agent_object,
    load_tool,
)
from daimon.cli.render import JsonRenderer, Renderer, TerminalRenderer
from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError, DaimonError, MissingDependencyError, RunCancelled
from daimon.core.messages import ContentPart, Message, TextPart, media_from_file
from daimon.core.protocols import Model
from daimon.models import infer_model

if TYPE_CHECKING:
    from daimon.limits import Limiter

__all__ = ("EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "app")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

DEMO_TOOL = "daimon.cli.demo:calculator"

app = typer.Typer(
    name="daimon",
    help="Run daimon agents from the terminal. With no API key, a local model runs in-process.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(db_app, name="db")

ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        metavar="MODEL",
        help="Model string, e.g. openai:gpt-4o-mini or local:smollm2 or local:/path/model.gguf. "
        "Default: the first provider with an API key in the environment, else the local model.",
    ),
]
SystemOption = Annotated[
    str | None, typer.Option("--system", "-s", metavar="TEXT", help="System prompt.")
]
ToolOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tool",
        "-t",
        metavar="PKG.MODULE:FUNCTION",
        help="A tool, as package.module:function (repeatable).",
    ),
]
AgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent",
        "-a",
        metavar="MODULE:ATTR|FILE",
        help="An agent as module:attr (an Agent or a function returning one), "
        "or a YAML/TOML agent file.",
    ),
]
FileOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--file",
        "-f",
        metavar="PATH",
        help="A file for the model to see with the prompt: an image, audio, a PDF or a text "
        "file (repeatable).",
    ),
]
MCPOption = Annotated[
    list[str] | None,
    typer.Option(
        "--mcp",
        metavar="SERVER",
        help="An MCP server whose tools the agent gets: an http(s):// or ws(s):// URL, or a "
        'command line that starts a stdio server, e.g. "python my_server.py" (repeatable).',
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print machine-readable events, one JSON object per line.")
]


class _Exit(Exception):
    """Leave the command with an exit code, after the message was shown."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass(slots=True)
class _Setup:
    agent: Agent
    renderer: Renderer
    servers: Sequence[str] = ()
    ask_user: bool = False
    stack: contextlib.AsyncExitStack | None = None


def _renderer(json_output: bool) -> Renderer:
    return JsonRenderer() if json_output else TerminalRenderer()


def _build_agent(
    renderer: Renderer,
    *,
    model: str | None,
    system: str | None,
    tools: Sequence[str],
    agent_spec: str | None,
    demo_tool: bool,
) -> Agent:
    """The agent the options describe; :class:`ConfigError` (and friends) when they are wrong."""
    config: AgentConfig | None = None
    if agent_spec is not None:
        if not is_agent_file(agent_spec):
            if model is not None or system is not None or tools:
                raise ConfigError(
                    "--model, --system and --tool cannot change an agent given as module:attr; "
                    "use an agent file, or configure the Agent in code"
                )
            agent = load_agent_object(agent_spec)
            renderer.note(f"agent: {agent_spec} (model: {agent.model.model_name})")
            return agent
        config = load_agent_file(agent_spec)

    if model is not None:
        model_string, reason = model, "--model"
    elif config is not None and config.model is not None:
        model_string, reason = config.model, f"from {config.source}"
    else:
        model_string, reason = choose_model()
    tool_paths = [*(config.tools if config else ()), *tools]
    use_demo = (
        demo_tool and not tool_paths and model is None and config is None
    ) and model_string.startswith("local:")
    if use_demo:
        tool_paths = [DEMO_TOOL]
    renderer.note(f"model: {model_string} ({reason})")
    if use_demo:
        renderer.note("tools: calculator (built-in demo tool; --tool picks your own)")
    loaded_tools = [load_tool(path) for path in tool_paths]
    built: Model = infer_model(model_string)
    return Agent(
        built,
        name=config.name if config else "agent",
        system_prompt=system if system is not None else (config.system_prompt if config else None),
        tools=loaded_tools,
        skills=config.skills if config and config.skills else None,
        memory=config.memory.build() if config and config.memory else None,
        max_iterations=config.max_iterations if config else 10,
        max_tokens=config.max_tokens if config else None,
        max_repeated_tool_calls=config.max_repeated_tool_calls if config else 3,
        temperature=config.temperature if config else None,
        model_settings=config.model_settings if config else None,
        limits=_file_limiter(config),
    )


def _file_limiter(config: AgentConfig | None) -> Limiter | None:
    """The limiter of an agent file's ``rate_limits``, if it has them."""
    if config is None or config.rate_limits is None:
        return None
    from daimon.cli.limits import limiter_for

    try:
        return limiter_for(config.rate_limits, config.rate_limits_store)
    except BuilderError as exc:
        raise ConfigError(f"agent file {config.source!r}: rate_limits.store: {exc}") from None


def _setup(
    json_output: bool,
    *,
    model: str | None,
    system: str | None,
    tools: Sequence[str] | None,
    agent_spec: str | None,
    demo_tool: bool,
    servers: Sequence[str] | None = None,
    ask_user: bool = False,
) -> _Setup:
    renderer = _renderer(json_output)
    try:
        agent = _build_agent(
            renderer,
            model=model,
            system=system,
            tools=tools or (),
            agent_spec=agent_spec,
            demo_tool=demo_tool,
        )
    except DaimonError as exc:  # configuration mistakes, missing extras: nothing ran yet
        renderer.error(str(exc), type(exc).__name__)
        raise _Exit(EXIT_USAGE) from None
    return _Setup(agent, renderer, tuple(servers or ()), ask_user)


async def _connect(setup: _Setup) -> None:
    """Connect the ``--mcp`` servers and give the agent their tools; unreachable: a usage error."""
    from daimon.cli.mcp_servers import ask_at_terminal, connect_servers, declining

    console = getattr(setup.renderer, "err", None) or Console(stderr=True, highlight=False)
    handler = ask_at_terminal(console) if setup.ask_user else declining(console)
    setup.stack = contextlib.AsyncExitStack()
    try:
        tools = await connect_servers(setup.servers, handler, setup.stack)
    except DaimonError as exc:
        setup.renderer.error(str(exc), type(exc).__name__)
        raise _Exit(EXIT_USAGE) from None
    names = ", ".join(tool.name for tool in tools) or "none"
    setup.renderer.note(f"MCP tools: {names}")
    setup.agent = setup.agent.replace(tools=[*setup.agent.tools, *tools])


async def _load(setup: _Setup) -> None:
    """Load a local model's weights under a spinner; a file that will not load is a usage error."""
    if setup.servers:
        await _connect(setup)
    load: Callable[[], Any] | None = getattr(setup.agent.model, "load", None)
    if load is None:
        return
    try:
        with setup.renderer.waiting(f"Loading {setup.agent.model.model_name}…"):
            await load()
    except DaimonError as exc:
        setup.renderer.error(str(exc), type(exc).__name__)
        raise _Exit(EXIT_USAGE) from None


async def _close(setup: _Setup) -> None:
    if setup.stack is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(setup.stack.aclose(), timeout=30)
    aclose: Callable[[], Any] | None = getattr(setup.agent.model, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(aclose(), timeout=30)


async def _turn(setup: _Setup, prompt: str | Message, *, session_id: str | None = None) -> int:
    """One prompt, streamed; Ctrl-C cancels it through a :class:`CancelToken`."""
    token = CancelToken()
    loop = asyncio.get_running_loop()
    presses = 0

    def on_interrupt() -> None:
        nonlocal presses
        presses += 1
        if presses > 1:  # a second Ctrl-C while the run winds down: leave at once
            os._exit(EXIT_INTERRUPTED)
        token.cancel("interrupted")

    handled = True
    try:
        loop.add_signal_handler(signal.SIGINT, on_interrupt)
    except (NotImplementedError, RuntimeError):  # no signal handlers here (Windows, a thread)
        handled = False
    renderer = setup.renderer
    renderer.start()
    try:
        async for event in setup.agent.prompt_stream(prompt, session_id=session_id, cancel=token):
            renderer.event(event)
    except RunCancelled:
        renderer.interrupted()
        return EXIT_INTERRUPTED
    except (BuilderError, MissingDependencyError) as exc:
        renderer.error(str(exc), type(exc).__name__)
        return EXIT_USAGE
    except DaimonError as exc:
        renderer.error(str(exc), type(exc).__name__)
        return EXIT_FAILED
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)
    return EXIT_OK


async def _run_once(setup: _Setup, prompt: str | Message) -> int:
    try:
        await _load(setup)
        return await _turn(setup, prompt)
    finally:
        await _close(setup)


@app.command()
def run(
    prompt: Annotated[
        str,
        typer.Argument(metavar="PROMPT", help='The prompt; "-" reads it from standard input.'),
    ],
    model: ModelOption = None,
    system: SystemOption = None,
    tool: ToolOption = None,
    agent: AgentOption = None,
    json_output: JsonOption = False,
    file: FileOption = None,
    mcp: MCPOption = None,
) -> None:
    """Answer one prompt, streaming the answer and showing tool calls as they happen.

    With the local default model and no --tool, the built-in calculator is the agent's tool.
    Each --file goes to the model with the prompt (a model that cannot take it says so).
    Each --mcp server's tools are the agent's too; when one asks the user something, a
    terminal is asked, else (stdin not a terminal, or --json) the question is declined.
    """
    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise typer.BadParameter("the prompt is empty", param_hint="PROMPT")
    message = _with_files(prompt, file or [])
    setup = _setup(
        json_output,
        model=model,
        system=system,
        tools=tool,
        agent_spec=agent,
        demo_tool=not mcp,
        servers=mcp,
        ask_user=sys.stdin.isatty() and not json_output,
    )
    raise _Exit(asyncio.run(_run_once(setup, message)))


def _with_files(prompt: str, files: Sequence[Path]) -> str | Message:
    """The prompt, with the files' contents as parts of the user message when there are any."""
    if not files:
        return prompt
    parts: list[ContentPart] = [TextPart(text=prompt)]
    for path in files:
        try:
            parts.append(media_from_file(path))
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--file") from exc
    return Message.user(parts)


_CHAT_HELP = "/reset forgets the conversation · /exit (or Ctrl-D) leaves · Ctrl-C stops an answer"


@app.command()
def chat(
    model: ModelOption = None,
    system: SystemOption = None,
    tool: ToolOption = None,
    agent: AgentOption = None,
    json_output: JsonOption = False,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            metavar="ID",
            help="Session id, to continue a conversation kept in memory.",
        ),
    ] = None,
    mcp: MCPOption = None,
) -> None:
    """Chat with an agent; the conversation is kept in the agent's memory.

    Each --mcp server's tools are the agent's too; when one asks the user something, the
    question is asked here, one line per field (or declined with --json).
    """
    setup = _setup(
        json_output,
        model=model,
        system=system,
        tools=tool,
        agent_spec=agent,
        demo_tool=False,
        servers=mcp,
        ask_user=not json_output,
    )
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401 - line editing and history for input()
    session_id = session or uuid.uuid4().hex
    code = EXIT_OK
    with asyncio.Runner() as runner:
        try:
            runner.run(_load(setup))
            setup.renderer.note(_CHAT_HELP)
            prompt = "" if json_output else "you> "
            while True:
                try:
                    line = input(prompt)
                except EOFError:
                    typer.echo(err=True)
                    break
                except KeyboardInterrupt:
                    typer.echo(err=True)
                    code = EXIT_INTERRUPTED
                    break
                text = line.strip()
                if not text:
                    continue
                if text in ("/exit", "/quit"):
                    break
                if text == "/reset":
                    runner.run(setup.agent.memory.clear(session_id))
                    setup.renderer.note("conversation forgotten")
                    continue
                if text.startswith("/"):
                    setup.renderer.note(f"unknown command {text.split()[0]}; {_CHAT_HELP}")
                    continue
                runner.run(_turn(setup, text, session_id=session_id))
        finally:
            runner.run(_close(setup))
    raise _Exit(code)


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Show the version and exit.")] = False,
) -> None:
    if version:
        typer.echo(f"daimon {_version()}")
        raise typer.Exit()


def _version() -> str:
    """The installed distribution's version; the package's own when run from a source tree."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    from daimon import __version__
    from daimon.core.errors import DISTRIBUTION

    try:
        return dist_version(DISTRIBUTION)
    except PackageNotFoundError:  # not installed (PYTHONPATH=src): the code that runs says
        return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``daimon`` command; returns its exit code (see the module docstring)."""
    try:
        result = app(args=list(argv) if argv is not None else None, standalone_mode=False)
    except _Exit as done:
        return done.code
    except MissingDependencyError as exc:  # any command: the extra it needs is not installed
        TerminalRenderer().error(str(exc), type(exc).__name__)
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        return EXIT_INTERRUPTED
    except typer.Exit as done:
        return int(done.exit_code)
    except (typer.Abort, EOFError):
        return EXIT_INTERRUPTED
    except Exception as exc:  # click's usage errors
        show = getattr(exc, "show", None)
        if show is None:
            raise
        show()
        return int(getattr(exc, "exit_code", EXIT_USAGE))
    return result if isinstance(result, int) else EXIT_OK
