"""The runtimes a local model runs on: mistral.rs (prebuilt wheel) and llama.cpp (compiled).

Both get the same thing from daimon: the chat messages, the prompt daimon rendered from them with
the model's chat template, and the output shape (:class:`~daimon.models.local._prompt.Output`),
which each turns into its own grammar language. llama.cpp is given the rendered prompt. mistral.rs
is given the messages: it renders the same GGUF template itself (minijinja, no escaping), since its
raw-prompt request cannot stream; a test checks both prompts are the same tokens. Each yields
text pieces as they are sampled and ends with a :class:`Finish`. They run on a worker thread,
one request at a time, with the model's lock held.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from daimon.core.errors import ModelError
from daimon.core.optional import require
from daimon.models.local._gguf import GGUFError, read_metadata
from daimon.models.local._prompt import Output, gbnf_grammar, lark_grammar

__all__ = (
    "Finish",
    "LlamaCppRuntime",
    "MistralRsRuntime",
    "RUNTIMES",
    "Runtime",
    "label_scores",
)

_PROVIDER = "local"


@dataclass(frozen=True, slots=True)
class Finish:
    """How a generation ended."""

    prompt_tokens: int
    completion_tokens: int
    reason: str
    """``"stop"`` (the model finished) or ``"length"`` (``max_tokens`` ran out)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """What every runtime is built with."""

    path: Path
    n_ctx: int
    n_threads: int
    seed: int
    options: Mapping[str, Any]
    """Runtime-specific keyword arguments (``llama_cpp.Llama``'s, or ``mistralrs.Runner``'s)."""


class Runtime(Protocol):
    """One loaded model on one inference library."""

    def generate(
        self,
        prompt: str,
        messages: Sequence[Mapping[str, str]],
        output: Output,
        *,
        max_tokens: int,
        temperature: float,
        stop: threading.Event,
    ) -> Iterator[str | Finish]: ...

    def label_logprobs(
        self, prompt: str, messages: Sequence[Mapping[str, str]], labels: Sequence[str]
    ) -> list[float]:
        """Log-probability of each label's first token as the first token after ``prompt``."""
        ...

    def count_tokens(self, text: str) -> int: ...

    def close(self) -> None: ...


_UNLIKELY = -50.0
"""The log-probability given to a label no candidate token begins."""
_TOP = 100
"""Candidate tokens asked for when scoring labels (every token a label can begin with)."""


def label_scores(candidates: Sequence[tuple[int, float]], firsts: Sequence[int]) -> list[float]:
    """Each label's log-probability: that of its first token among ``candidates``.

    ``candidates`` are (token id, log-probability) pairs; ``firsts`` the first token of each
    label as the tokenizer writes it.
    """
    scores = dict(candidates)
    return [scores.get(token, _UNLIKELY) for token in firsts]


_REQUANTIZE = {3: "Q8_0"}
"""GGUF file types (``general.file_type``) mistral.rs requantizes on load, and to what: its CPU
has no SIMD kernel for Q4_1 (a scalar dot product took 84 % of the time, five times
llama.cpp's CPU per token); as Q8_0 it runs about as fast as llama.cpp (docs/benchmarks.md)."""


def _mistralrs_options(settings: Settings) -> dict[str, Any]:
    """``mistralrs.Runner``'s keyword arguments: daimon's defaults, then the caller's."""
    options: dict[str, Any] = {"max_seqs": 1, "prefix_cache_n": 4}
    try:
        file_type = read_metadata(settings.path).file_type
    except (GGUFError, OSError):
        file_type = None  # the runtime reports the file's fault itself
    if file_type in _REQUANTIZE:
        options["in_situ_quant"] = _REQUANTIZE[file_type]
    return {**options, **settings.options}


class MistralRsRuntime:
    """mistral.rs (``pip install mistralrs``: a prebuilt wheel, nothing to compile).

    The GGUF file carries the tokenizer, so nothing is fetched (``HF_HUB_OFFLINE`` is set). Its
    CPU kernels use ``RAYON_NUM_THREADS`` threads, set from ``n_threads`` unless already set;
    its log level is ``RUST_LOG`` (``error`` unless set). Q4_1 weights are requantized to Q8_0
    on load (``runtime_options={"in_situ_quant": None}`` keeps them as they are).
    """

    name = "mistralrs"
    module = "mistralrs"
    extra = "local"

    __slots__ = ("_mistralrs", "_runner")

    def __init__(self, settings: Settings) -> None:
        os.environ.setdefault("RAYON_NUM_THREADS", str(settings.n_threads))
        os.environ.setdefault("RUST_LOG", "error")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self._mistralrs = require("mistralrs", extra="local")
        which = self._mistralrs.Which.GGUF(
            quantized_model_id=str(settings.path.parent),
            quantized_filename=settings.path.name,
        )
        options = _mistralrs_options(settings)
        try:
            self._runner = self._mistralrs.Runner(which=which, **options)
        except BaseException as exc:
            # Any failure to load is the file's, including a Rust panic (pyo3's PanicException
            # derives from BaseException).
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise ModelError(
                f"mistral.rs could not load {str(settings.path)!r}: {exc}", provider=_PROVIDER
            ) from exc

    def generate(
        self,
        prompt: str,
        messages: Sequence[Mapping[str, str]],
        output: Output,
        *,
        max_tokens: int,
        temperature: float,
        stop: threading.Event,
    ) -> Iterator[str | Finish]:
        grammar = lark_grammar(output) if output.constrained else None
        request = self._mistralrs.ChatCompletionRequest(
            model="default",
            messages=[dict(message) for message in messages],
            max_tokens=max_tokens,
            temperature=temperature,
            grammar=grammar,
            grammar_type="lark" if grammar else None,
            stream=True,
        )
        reason = "stop"
        usage: Any = None
        for chunk in self._runner.send_chat_completion_request(request):
            if stop.is_set():
                return
            for choice in chunk.choices:
                if choice.delta.content:
                    yield choice.delta.content
                if choice.finish_reason:
                    reason = choice.finish_reason
            usage = chunk.usage or usage
        prompt_tokens = int(usage.prompt_tokens) if usage else self.count_tokens(prompt)
        completion = int(usage.completion_tokens) if usage else 0
        yield Finish(prompt_tokens, completion, "length" if reason == "length" else "stop")

    def label_logprobs(
        self, prompt: str, messages: Sequence[Mapping[str, str]], labels: Sequence[str]
    ) -> list[float]:
        # A grammar allows only the labels, so the candidates mistral.rs reports are the tokens
        # that begin one (unconstrained, the labels lay beyond its top 100). Each label is read
        # from its own first token, as llama.cpp reads it: the grammar renormalizes all scores
        # alike, so the choice is the same on both runtimes.
        grammar = "start: " + " | ".join(json.dumps(label) for label in labels) + "\n"
        request = self._mistralrs.ChatCompletionRequest(
            model="default",
            messages=[dict(message) for message in messages],
            max_tokens=1,
            temperature=0.0,
            logprobs=True,
            top_logprobs=_TOP,
            grammar=grammar,
            grammar_type="lark",
        )
        response = self._runner.send_chat_completion_request(request)
        content = response.choices[0].logprobs.content
        candidates = content[0].top_logprobs if content else []
        firsts = [self._runner.tokenize_text(label, False, None)[0] for label in labels]
        return label_scores([(top.token, top.logprob) for top in candidates], firsts)

    def count_tokens(self, text: str) -> int:
        return len(self._runner.tokenize_text(text, False, None))

    def close(self) -> None:
        self._runner = None


class LlamaCppRuntime:
    """llama.cpp via llama-cpp-python (``pip install "daimon-agents[local-llama]"``, compiles)."""

    name = "llama"
    module = "llama_cpp"
    extra = "local-llama"

    __slots__ = ("_converter", "_llama", "_llama_cpp")

    def __init__(self, settings: Settings) -> None:
        self._llama_cpp = require("llama_cpp", extra="local-llama")
        self._converter = require("llama_cpp.llama_grammar", extra="local-llama").SchemaConverter
        try:
            self._llama = self._llama_cpp.Llama(
                model_path=str(settings.path),
                n_ctx=settings.n_ctx,
                n_threads=settings.n_threads,
                n_threads_batch=settings.n_threads,
                seed=settings.seed,
                verbose=False,
                **settings.options,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(
                f"llama.cpp could not load {str(settings.path)!r}: {exc}", provider=_PROVIDER
            ) from exc

    def generate(
        self,
        prompt: str,
        messages: Sequence[Mapping[str, str]],
        output: Output,
        *,
        max_tokens: int,
        temperature: float,
        stop: threading.Event,
    ) -> Iterator[str | Finish]:
        llama = self._llama
        grammar = None
        if output.constrained:
            grammar = self._llama_cpp.LlamaGrammar.from_string(
                gbnf_grammar(output, self._converter), verbose=False
            )
        # special=True: the template's control tokens (<|im_start|>...) are tokens, not text.
        tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        stream = llama.create_completion(
            tokens,
            max_tokens=max_tokens,
            temperature=temperature,
            grammar=grammar,
            stream=True,
        )
        generated = 0
        reason = "stop"
        try:
            for chunk in stream:
                if stop.is_set():
                    return
                choice = cast("dict[str, Any]", chunk)["choices"][0]
                if choice.get("text"):
                    generated += 1
                    yield choice["text"]
                reason = choice.get("finish_reason") or reason
        finally:
            stream.close()
        yield Finish(len(tokens), generated, "length" if reason == "length" else "stop")

    def label_logprobs(
        self, prompt: str, messages: Sequence[Mapping[str, str]], labels: Sequence[str]
    ) -> list[float]:
        np = require("numpy", extra="local-llama")

        llama = self._llama
        llama.reset()
        llama.eval(llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))
        # The last position's logits, from the context itself: llama-cpp-python 0.3 keeps
        # ``Llama.scores`` only with ``logits_all=True`` (all zeros otherwise, a uniform guess).
        last = self._llama_cpp.llama_get_logits_ith(llama.ctx, -1)
        logits = np.ctypeslib.as_array(last, shape=(llama.n_vocab(),)).astype(np.float64)
        top = float(logits.max())
        log_total = top + float(np.log(np.exp(logits - top).sum()))
        ids = [llama.tokenize(label.encode("utf-8"), add_bos=False)[0] for label in labels]
        return [float(logits[token]) - log_total for token in ids]

    def count_tokens(self, text: str) -> int:
        # special=True, as for prompts: a chat template's control tokens count one each.
        tokens = self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        return len(cast("list[int]", tokens))

    def close(self) -> None:
        self._llama.close()


RUNTIMES: Mapping[str, type[MistralRsRuntime] | type[LlamaCppRuntime]] = {
    "mistralrs": MistralRsRuntime,
    "llama": LlamaCppRuntime,
}
"""Runtime names (``local:smollm2?runtime=<name>``) to their classes; the first is the default."""
