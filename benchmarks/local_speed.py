"""Raw speed of the two local runtimes on the bundled SmolLM2 GGUF: load, prompt, generation.

Each request is timed by the wall clock and by this process's CPU time (all its threads), so a
busy machine slows the first but hardly the second. Run one runtime per process::

    python benchmarks/local_speed.py mistralrs            # default settings
    python benchmarks/local_speed.py mistralrs --dtype F16 --grammar
    RAYON_NUM_THREADS=2 python benchmarks/local_speed.py mistralrs
    python benchmarks/local_speed.py llama --grammar
    python benchmarks/local_speed.py mistralrs --isq Q8_0     # requantized on load

Prints one JSON line: load seconds, and per request the prompt and completion tokens, wall and
CPU seconds; then tokens per CPU second for the whole (prompt + completion).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from daimon.models.local import bundled_model_path

TEXT = "Tell me about the history of the city of Rome, its founding, the republic, the empire. " * 3
GRAMMAR_LARK = "start: /[a-zA-Z ,.]+/\n"
GRAMMAR_GBNF = "root ::= [a-zA-Z ,.]+\n"


def _mistralrs(args: argparse.Namespace) -> tuple[float, Any]:
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))
    os.environ.setdefault("RUST_LOG", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import mistralrs

    path = bundled_model_path()
    start = time.perf_counter()
    which = mistralrs.Which.GGUF(
        quantized_model_id=str(path.parent),
        quantized_filename=path.name,
        dtype=getattr(mistralrs.ModelDType, args.dtype),
    )
    runner = mistralrs.Runner(which=which, max_seqs=1, in_situ_quant=args.isq)
    load = time.perf_counter() - start

    def ask(text: str) -> tuple[int, int]:
        request = mistralrs.ChatCompletionRequest(
            model="default",
            messages=[{"role": "user", "content": text}],
            max_tokens=args.tokens,
            temperature=0.0,
            grammar=GRAMMAR_LARK if args.grammar else None,
            grammar_type="lark" if args.grammar else None,
            ignore_eos=True,
        )
        usage = runner.send_chat_completion_request(request).usage
        return int(usage.prompt_tokens), int(usage.completion_tokens)

    return load, ask


def _llama(args: argparse.Namespace) -> tuple[float, Any]:
    import llama_cpp

    path = bundled_model_path()
    start = time.perf_counter()
    llama = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=2048,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
    )
    load = time.perf_counter() - start
    grammar = (
        llama_cpp.LlamaGrammar.from_string(GRAMMAR_GBNF, verbose=False) if args.grammar else None
    )

    def ask(text: str) -> tuple[int, int]:
        out = llama.create_chat_completion(
            messages=[{"role": "user", "content": text}],
            max_tokens=args.tokens,
            temperature=0.0,
            grammar=grammar,
        )
        usage = out["usage"]
        return int(usage["prompt_tokens"]), int(usage["completion_tokens"])

    return load, ask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runtime", choices=("mistralrs", "llama"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per request")
    parser.add_argument("--dtype", default="Auto", help="mistral.rs activation dtype")
    parser.add_argument("--grammar", action="store_true", help="constrain the output")
    parser.add_argument("--isq", help="mistral.rs: requantize the weights on load (Q8_0, Q4K)")
    args = parser.parse_args()
    load, ask = (_mistralrs if args.runtime == "mistralrs" else _llama)(args)
    runs = []
    for i in range(args.rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        prompt, completion = ask(f"({i}) {TEXT}")  # a new prompt each round: no cache
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        runs.append(
            {
                "prompt": prompt,
                "completion": completion,
                "wall": round(wall, 2),
                "cpu": round(cpu, 2),
            }
        )
    tokens = sum(r["prompt"] + r["completion"] for r in runs)
    cpu = sum(r["cpu"] for r in runs)
    print(
        json.dumps(
            {
                "runtime": args.runtime,
                "load": round(load, 2),
                "runs": runs,
                "tokens_per_cpu_s": round(tokens / cpu, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
