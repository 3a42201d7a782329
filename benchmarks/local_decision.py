"""The local model's two weak steps, measured apart: choosing a tool, and using its result.

Runs the bundled SmolLM2 on one runtime over the 34 tuning tasks of ``evals/local/tools.yaml``
(``--dataset heldout``: the 26 of ``evals/local/heldout.yaml``, never used to tune anything)::

    python benchmarks/local_decision.py llama decide similarity likeliest calibrated grammar
    python benchmarks/local_decision.py mistralrs decide similarity likeliest --dataset heldout
    python benchmarks/local_decision.py mistralrs match --thresholds 0.10,0.15,0.20
    python benchmarks/local_decision.py llama decide scores+yesno --wording first
    python benchmarks/local_decision.py mistralrs answer --results fold
    python benchmarks/local_decision.py mistralrs answer --results turn

``decide`` asks each task's question with both tools offered and counts how often each decision
rule picks the task's kind (calculator, lookup, or no tool): ``similarity``, ``calibrated``,
``likeliest`` and ``grammar`` are ``LocalModel(tool_decision=...)``; ``match`` is the similarity
rule alone (the embedding model, no chat model: the runtime is not used; small talk included) at
each of ``--thresholds``; ``scores`` reads the label scores once per
question and applies every rule that reads them (``calibrated``, ``likeliest``, and with
``scores+yesno`` also ``yesno``: each tool asked about on its own, "needed? Yes/No", raw and
calibrated), under the decision wording ``--wording``.

``answer`` gives the model each tool task with the right call already made and the tool's true
result (written as ``--results`` says), and counts answers that contain the expected value (the
eval's ``contains`` check), so the answer step is measured without the choice's errors.

Prints one JSON line per rule: right choices by kind (or answers with the value), and seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KINDS = ("calculator", "lookup", "none")


def _kind(scenario: dict[str, Any]) -> str:
    tags = set(scenario.get("tags", ()))
    return next((kind for kind in KINDS[:2] if kind in tags), "none")


def _scenarios(dataset: str) -> list[dict[str, Any]]:
    import yaml

    path = ROOT / "evals" / "local" / f"{dataset}.yaml"
    tasks: list[dict[str, Any]] = yaml.safe_load(path.read_text())
    return tasks


def _match(scenarios: list[dict[str, Any]], thresholds: list[float]) -> list[dict[str, Any]]:
    """The similarity rule (``ToolMatcher.choose``) at each threshold."""
    from evals.local.agent import calculator, lookup

    from daimon.models.local._similarity import ToolMatcher

    tools = [calculator.spec, lookup.spec]
    started = time.perf_counter()
    matcher = ToolMatcher()
    matcher.choose("warm-up", tools)  # loads the model and embeds the tools
    warm = time.perf_counter()
    rows = []
    for threshold in thresholds:
        matcher.threshold = threshold
        picks = [matcher.choose(scenario["input"], tools) for scenario in scenarios]
        rows.append({"rule": "similarity", "threshold": threshold, **_tally(scenarios, picks)})
    per_question_ms = (time.perf_counter() - warm) * 1000 / (len(scenarios) * len(thresholds))
    rows.append(
        {"load_seconds": round(warm - started, 2), "ms_per_question": round(per_question_ms, 2)}
    )
    return rows


async def _decide(runtime: str, rule: str, scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    """One decision rule as ``LocalModel`` applies it (``grammar``: through ``generate``)."""
    from evals.local.agent import calculator, lookup

    from daimon import ChatRequest, Message
    from daimon.models.local import LocalModel

    model = LocalModel(runtime=runtime, tool_decision=rule, max_tokens=48)
    tools = [calculator.spec, lookup.spec]
    picks: list[str] = []
    started = time.perf_counter()
    for scenario in scenarios:
        request = ChatRequest(
            messages=[Message.user(scenario["input"])], tools=tools, temperature=0
        )
        if rule == "grammar":  # the choice is made while the answer is written
            response = await model.generate(request)
            picks.append(response.message.tool_calls[0].name if response.has_tool_calls else "none")
        else:  # the choice alone: a call the model then fails to finish still counts as chosen
            picks.append(model._decide(model._load_locked(), request))
    await model.aclose()
    return {"rule": rule, **_tally(scenarios, picks), "seconds": _since(started), "picks": picks}


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 1)


def _tally(scenarios: list[dict[str, Any]], picks: list[str]) -> dict[str, Any]:
    right = dict.fromkeys(KINDS, 0)
    total = dict.fromkeys(KINDS, 0)
    for scenario, pick in zip(scenarios, picks, strict=True):
        kind = _kind(scenario)
        total[kind] += 1
        right[kind] += pick == kind
    tally: dict[str, Any] = {"right": sum(right.values()), "of": len(picks)}
    chat = [pick for s, pick in zip(scenarios, picks, strict=True) if "small-talk" in s["tags"]]
    small_talk = {"small-talk": f"{chat.count('none')}/{len(chat)}"} if chat else {}
    return tally | {kind: f"{right[kind]}/{total[kind]}" for kind in KINDS} | small_talk


def _scores(
    runtime: str, scenarios: list[dict[str, Any]], with_yesno: bool, wording: str
) -> list[dict[str, Any]]:
    """The label scores behind each rule, read once per question; every rule from them."""
    from evals.local.agent import calculator, lookup

    from daimon.models.local import LocalModel
    from daimon.models.local._prompt import NO_TOOL, decision_messages

    model = LocalModel(runtime=runtime)
    engine = model._load_locked()
    template = model.template
    tools = [calculator.spec, lookup.spec]
    labels = [spec.name for spec in tools] + [NO_TOOL]

    ask = WORDINGS.get(wording, decision_messages)

    def labels_for(question: str) -> list[float]:
        asked = ask(question, tools)
        return engine.label_logprobs(template.render(asked), asked, labels)

    def margins(question: str) -> list[float]:
        out: list[float] = []
        if not with_yesno:
            return [0.0] * len(tools)
        for spec in tools:
            asked = need_messages(question, spec)
            yes, no = engine.label_logprobs(template.render(asked), asked, [YES, NO])
            out.append(yes - no)
        return out

    started = time.perf_counter()
    base_labels, base_margins = labels_for("N/A"), margins("N/A")
    rows = [(labels_for(s["input"]), margins(s["input"])) for s in scenarios]
    seconds = _since(started)
    model.close()

    def pick_label(scores: list[float], base: list[float] | None) -> str:
        values = [a - b for a, b in zip(scores, base, strict=True)] if base else scores
        return labels[values.index(max(values))]

    def pick_yes(values: list[float], base: list[float] | None) -> str:
        adjusted = [a - b for a, b in zip(values, base, strict=True)] if base else values
        best = max(adjusted)
        return labels[adjusted.index(best)] if best > 0 else NO_TOOL

    rules = {
        "calibrated": [pick_label(r[0], base_labels) for r in rows],
        "likeliest": [pick_label(r[0], None) for r in rows],
        "yesno": [pick_yes(r[1], None) for r in rows],
        "yesno-calibrated": [pick_yes(r[1], base_margins) for r in rows],
    }
    out = [
        {"rule": rule, **_tally(scenarios, picks), "picks": picks} for rule, picks in rules.items()
    ]
    out.append(
        {
            "seconds": seconds,
            "base_margins": base_margins,
            "margins": [[round(m, 2) for m in r[1]] for r in rows],
        }
    )
    return out


async def _call(runtime: str, scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    """Each tool task with its tool forced: how often the arguments are right."""
    from evals.local.agent import DIRECTORY, calculator, lookup

    from daimon import ChatRequest, Message
    from daimon.cli.demo import evaluate
    from daimon.models.local import LocalModel

    model = LocalModel(runtime=runtime, max_tokens=64)
    tools = [calculator.spec, lookup.spec]
    right = {"calculator": 0, "lookup": 0}
    calls: list[str] = []
    started = time.perf_counter()
    for scenario in scenarios:
        kind = _kind(scenario)
        if kind == "none":
            continue
        request = ChatRequest(
            messages=[Message.user(scenario["input"])], tools=tools, tool_choice=kind, temperature=0
        )
        try:
            response = await model.generate(request)
            arguments = response.message.tool_calls[0].arguments
        except Exception as exc:  # a call cut short counts as wrong
            arguments = {"error": str(exc)[:60]}
        assert isinstance(arguments, dict)
        if kind == "calculator":
            try:
                ok = evaluate(str(arguments.get("expression"))) == evaluate(
                    CALC_ARGS[scenario["name"]]
                )
            except ValueError:
                ok = False
        else:
            ok = str(arguments.get("name", "")).lower() in DIRECTORY
        right[kind] += ok
        calls.append(f"{'ok ' if ok else 'NO '}{scenario['name']}: {arguments}")
    await model.aclose()
    return {"right_arguments": right, "seconds": _since(started), "calls": calls}


async def _answer(runtime: str, scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    from evals.local.agent import DIRECTORY, calculator, lookup

    from daimon import ChatRequest, Message, ToolCall
    from daimon.cli.demo import evaluate
    from daimon.models.local import LocalModel

    model = LocalModel(runtime=runtime, max_tokens=64)
    tools = [calculator.spec, lookup.spec]
    passed = 0
    counted = 0
    answers: list[str] = []
    started = time.perf_counter()
    for scenario in scenarios:
        kind = _kind(scenario)
        wanted = [c["contains"] for c in scenario["expect"] if "contains" in c]
        if kind == "none" or not wanted:
            continue
        if kind == "calculator":
            expression = CALC_ARGS[scenario["name"]]
            arguments = {"expression": expression}
            value = evaluate(expression)
            result = str(int(value) if float(value).is_integer() else value)
        else:
            name = LOOKUP_ARGS[scenario["name"]]
            arguments = {"name": name}
            result = DIRECTORY[name.lower()]
        call = ToolCall(id="call_0", name=kind, arguments=arguments)
        messages = [
            Message.user(scenario["input"]),
            Message.assistant(tool_calls=[call]),
            Message.tool("call_0", result, name=kind),
        ]
        request = ChatRequest(messages=messages, tools=tools, temperature=0)
        response = await model.generate(request)
        counted += 1
        ok = all(str(w) in response.text for w in wanted)
        passed += ok
        answers.append(f"{'ok ' if ok else 'NO '}{scenario['name']}: {response.text[:90]!r}")
    await model.aclose()
    return {
        "runtime": runtime,
        "answers_with_the_value": passed,
        "of": counted,
        "seconds": round(time.perf_counter() - started, 1),
        "answers": answers,
    }


def _listing(tools: list[Any]) -> str:
    return "\n".join(f"- {t.name}: {t.description.strip().splitlines()[0]}" for t in tools)


def _single(question: str, tools: list[Any]) -> list[dict[str, str]]:
    text = (
        f"Message: {question}\n\nWhich tool does this message need?\n{_listing(tools)}\n"
        "- none: no tool (greetings, general knowledge, writing)\nReply with the name only."
    )
    return [{"role": "user", "content": text}]


def _labelled(question: str, tools: list[Any]) -> list[dict[str, str]]:
    system = (
        "Pick the tool for the message.\n"
        f"{_listing(tools)}\n- none: a greeting, general knowledge or writing: no tool.\n"
        "Reply with one name."
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Message: {question}"},
    ]


YES, NO = "Yes", "No"


def need_messages(question: str, spec: Any) -> list[dict[str, str]]:
    """The ``yesno`` rule's question: is this one tool needed? (Asked once per tool.)"""
    about = spec.description.strip().splitlines()[0]
    user = (
        f"Tool: {spec.name}: {about}\nMessage: {question}\n"
        f"Is the {spec.name} tool needed to answer this message? Answer {YES} or {NO}."
    )
    return [{"role": "user", "content": user}]


def _first(question: str, tools: list[Any]) -> list[dict[str, str]]:
    system = (
        "You choose the tool that answers the user's message.\n"
        f"Tools:\n{_listing(tools)}\n- none: no tool is needed (greetings, general knowledge, "
        "writing).\nReply with the tool's name only."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def _params(question: str, tools: list[Any]) -> list[dict[str, str]]:
    from daimon.models.local._prompt import without_examples

    def line(t: Any) -> str:
        props = t.parameters.get("properties", {})
        args = ", ".join(
            f"{k}: {without_examples(v.get('description', ''))}".rstrip(": ")
            for k, v in props.items()
        )
        return f"- {t.name}({args}): {t.description.strip().splitlines()[0]}"

    listing = "\n".join(line(t) for t in tools)
    system = (
        f"Pick the tool for the message.\n{listing}\n"
        "- none: a greeting, general knowledge or writing: no tool.\nReply with one name."
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Message: {question}"},
    ]


WORDINGS = {"params": _params, "first": _first, "single": _single, "labelled": _labelled}
"""Wordings of the decision question (``--wording``): ``first``, daimon's until the wording was
measured; ``labelled`` is daimon's now (``decision_messages``); ``single``, one user message."""

CALC_ARGS = {
    "calc-01": "17 * 23",
    "calc-02": "12.5 * 4 + 3",
    "calc-03": "144 / 12",
    "calc-04": "1234 + 5678",
    "calc-05": "99 * 99",
    "calc-06": "2 ** 10",
    "calc-07": "1000 - 357",
    "calc-08": "45 * 12",
    "calc-09": "(15 + 27) * 3",
    "calc-10": "7.5 * 8",
    "calc-11": "365 * 24",
    "calc-12": "81 / 9 + 7",
    "calc-13": "250 * 4 - 125",
    "calc-14": "19 ** 2",
    "calc-15": "6 * 14",
    "calc-16": "3.2 + 4.8 + 2",
}
"""The call a capable model makes for each arithmetic task."""
LOOKUP_ARGS = {
    "lookup-01": "Alice Martin",
    "lookup-02": "Bruno Silva",
    "lookup-03": "Chen Wei",
    "lookup-04": "Dana Cohen",
    "lookup-05": "Emil Novak",
    "lookup-06": "Fatima Zahra",
    "lookup-07": "Goran Petrov",
    "lookup-08": "Hana Sato",
    "lookup-09": "Alice Martin",
    "lookup-10": "Emil Novak",
    "lookup-11": "Bruno Silva",
    "lookup-12": "Chen Wei",
}
"""The call a capable model makes for each look-up."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runtime", choices=["mistralrs", "llama"])
    parser.add_argument("part", choices=["decide", "match", "call", "answer"])
    parser.add_argument("--list-chosen", action="store_true", help="list only the forced tool")
    parser.add_argument("rules", nargs="*", default=["calibrated"], help="decision rules")
    parser.add_argument("--only", help="tasks whose name starts with this")
    parser.add_argument("--dataset", choices=["tools", "heldout"], default="tools")
    parser.add_argument("--thresholds", default="0.10,0.12,0.15,0.18,0.20", help="for match")
    parser.add_argument(
        "--results", choices=["fold", "turn"], help="how tool results are written (answer)"
    )
    parser.add_argument("--wording", default="daimon", help="decision prompt (scores)")
    parser.add_argument("--note", help="the line after folded results (answer)")
    args = parser.parse_args()
    if args.results:
        from daimon.models.local import _prompt

        _prompt.RESULTS_STYLE = args.results
    if args.note is not None:
        from daimon.models.local import _prompt

        _prompt._FOLD_NOTE = args.note
    tasks = _scenarios(args.dataset)
    scenarios = [s for s in tasks if not args.only or s["name"].startswith(args.only)]
    if args.part == "match":
        thresholds = [float(t) for t in args.thresholds.split(",")]
        for row in _match(scenarios, thresholds):
            print(json.dumps({"dataset": args.dataset, **row}), flush=True)
        return
    if args.list_chosen:
        import daimon.models.local

        daimon.models.local._LIST_ALL_TOOLS = False
    if args.part == "call":
        print(json.dumps(asyncio.run(_call(args.runtime, scenarios))), flush=True)
        return
    if args.part == "answer":
        print(json.dumps(asyncio.run(_answer(args.runtime, scenarios))), flush=True)
        return
    for rule in args.rules:
        if rule.startswith("scores"):
            for row in _scores(args.runtime, scenarios, rule == "scores+yesno", args.wording):
                print(json.dumps({"runtime": args.runtime, **row}), flush=True)
        else:
            row = asyncio.run(_decide(args.runtime, rule, scenarios))
            print(json.dumps({"runtime": args.runtime, **row}), flush=True)


if __name__ == "__main__":
    main()
