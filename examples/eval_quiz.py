"""Evaluate an agent, then catch a regression in a new version of it (no API key needed).

Each scenario is an input and what the answer must satisfy: text it contains, a tool called
with given arguments, JSON matching a schema, a function of your own, or a judge model's verdict.
The runner runs them concurrently and reports pass/fail, score, latency and cost; comparing the
new version's report with the old one's lists what got worse. The same from the command line,
for CI: ``daimon eval dataset.yaml module:agent --threshold 0.9``.
"""

import asyncio
import json

from daimon import (
    Agent,
    ChatRequest,
    ChatResponse,
    ModelPrice,
    PriceTable,
    Role,
    ToolCall,
    Usage,
    tool,
)
from daimon.eval import (
    Contains,
    EvalOutput,
    EvalRunner,
    EvalScenario,
    Exact,
    JsonSchema,
    LLMJudge,
    ToolCalled,
    compare_reports,
    scorer,
)
from daimon.models import FunctionModel

PRICES = PriceTable({"demo": ModelPrice(input=1.0, output=4.0)}, as_of="2025-01-01")
USAGE = Usage(input_tokens=200, output_tokens=20, requests=1)


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def quiz_model(capital: str) -> FunctionModel:
    """Plays the agent's LLM; ``capital`` is its answer to the geography question."""

    def answer(request: ChatRequest) -> ChatResponse:
        question = request.messages[-1].text
        results = [m.text for m in request.messages if m.role is Role.TOOL]
        if results:
            return ChatResponse.reply(f"2 + 2 = {results[0]}", usage=USAGE, model="demo")
        if "2 + 2" in question:
            call = ToolCall(id="1", name="add", arguments={"a": 2, "b": 2})
            return ChatResponse.tool_use(call, usage=USAGE, model="demo")
        if "JSON" in question:
            return ChatResponse.reply(json.dumps({"city": capital}), usage=USAGE, model="demo")
        return ChatResponse.reply(capital, usage=USAGE, model="demo")

    return FunctionModel(answer)


def judge(request: ChatRequest) -> str:
    """Plays the judge's LLM: likes answers that name a city."""
    good = "Paris" in request.messages[0].text.split("Answer:")[-1]
    return json.dumps({"score": 1.0 if good else 0.0, "reason": "names Paris" if good else "no"})


@scorer
def short(output: EvalOutput) -> bool:
    """Answers fit on one line."""
    return "\n" not in output.text and len(output.text) < 80


SCENARIOS = [
    EvalScenario(
        name="adds",
        input="What is 2 + 2?",
        expect=(Contains("4"), ToolCalled("add", {"a": 2, "b": 2}), short),
    ),
    EvalScenario(name="capital", input="Capital of France?", expect=(Exact("Paris"),)),
    EvalScenario(
        name="json",
        input="Capital of France, as JSON?",
        expect=(JsonSchema({"type": "object", "required": ["city"]}),),
    ),
    EvalScenario(
        name="judged",
        input="Where is the Louvre?",
        expect=(LLMJudge(FunctionModel(judge), "Names the city."),),
    ),
]


async def main() -> None:
    v1 = Agent(quiz_model("Paris"), name="quiz-v1", tools=[add], cost_model=PRICES)
    v2 = v1.replace(model=quiz_model("Lyon"), name="quiz-v2")
    before = await EvalRunner(v1, concurrency=4).run(SCENARIOS)
    after = await EvalRunner(v2, concurrency=4).run(SCENARIOS)
    for report in (before, after):
        print(f"{report.name}: {report.passed}/{report.total} passed, cost ${report.cost:.6f}")
    for regression in compare_reports(before, after).regressions:
        print(f"regression: {regression.scenario}: {regression.reason}")


if __name__ == "__main__":
    asyncio.run(main())
