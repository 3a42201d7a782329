from __future__ import annotations

from typing import Any

from daimon.orchestration import (
    END,
    START,
    DagBuilder,
    GraphBuilder,
    WorkflowBuilder,
    workflow_node,
)


def node(ctx: Any) -> None:
    return None


def support_graph() -> Any:
    return (
        GraphBuilder("support")
        .add_node("classify", node)
        .add_node("math", node)
        .add_node("prose", node, destinations=["classify", END])
        .add_node("review", node)
        .add_edge(START, "classify")
        .add_router("classify", lambda state: "math", {"numbers": "math", "words": "prose"})
        .add_join(["math", "prose"], "review")
        .add_edge("review", END)
        .build()
    )


def test_graph_mermaid() -> None:
    assert support_graph().to_mermaid() == (
        "flowchart TD\n"
        '    __start__(["START"])\n'
        '    classify["classify"]\n'
        '    math["math"]\n'
        '    prose["prose"]\n'
        '    review["review"]\n'
        '    __end__(["END"])\n'
        "    __start__ --> classify\n"
        '    classify -->|"numbers"| math\n'
        '    classify -->|"words"| prose\n'
        "    prose -.-> classify\n"
        "    prose -.-> __end__\n"
        "    review --> __end__\n"
        '    math -->|"join"| review\n'
        '    prose -->|"join"| review\n'
    )


def test_graph_text() -> None:
    assert support_graph().to_text() == (
        "graph 'support': 4 nodes, 8 edges\n"
        "nodes:\n"
        "  classify\n"
        "  math\n"
        "  prose\n"
        "  review\n"
        "edges:\n"
        "  START --> classify\n"
        "  classify --[numbers]--> math\n"
        "  classify --[words]--> prose\n"
        "  prose ..> classify\n"
        "  prose ..> END\n"
        "  review --> END\n"
        "  math --[join]--> review\n"
        "  prose --[join]--> review\n"
    )


def test_mermaid_ids_stay_valid_for_any_name() -> None:
    graph = (
        GraphBuilder()
        .add_node("end", node)
        .add_node('say "hi"', node)
        .add_edge(START, "end")
        .add_edge("end", 'say "hi"')
        .add_edge('say "hi"', END)
        .build()
    )
    assert graph.to_mermaid() == (
        "flowchart TD\n"
        '    __start__(["START"])\n'
        '    node_0["end"]\n'
        '    node_1["say #quot;hi#quot;"]\n'
        '    __end__(["END"])\n'
        "    __start__ --> node_0\n"
        "    node_0 --> node_1\n"
        "    node_1 --> __end__\n"
    )


def test_dag_drawings() -> None:
    dag = (
        DagBuilder("fetch")
        .add_node("web", print)
        .add_node("docs", print)
        .add_node("merge", print, depends_on=["web", "docs"])
        .build()
    )
    assert dag.to_text() == (
        "dag 'fetch': 3 nodes, 2 edges\n"
        "nodes:\n"
        "  web\n"
        "  docs\n"
        "  merge\n"
        "edges:\n"
        "  web --> merge\n"
        "  docs --> merge\n"
    )
    assert dag.to_mermaid() == (
        "flowchart TD\n"
        '    web["web"]\n'
        '    docs["docs"]\n'
        '    merge["merge"]\n'
        "    web --> merge\n"
        "    docs --> merge\n"
    )
    lone = DagBuilder("lone").add_node("only", print).build()
    assert lone.to_text() == "dag 'lone': 1 nodes, 0 edges\nnodes:\n  only\nedges:\n  (none)\n"


@workflow_node(output="summary")
def summarize(text: str, style: str) -> str:
    return text


@workflow_node(output="title")
def title(summary: str, style: str) -> str:
    return summary


def test_workflow_drawings_label_edges_with_fields() -> None:
    workflow = (
        WorkflowBuilder("post", inputs={"text": str, "style": str})
        .add(summarize)
        .add(title)
        .build()
    )
    assert workflow.to_text() == (
        "workflow 'post': 2 nodes, 4 edges\n"
        "nodes:\n"
        "  summarize\n"
        "  title\n"
        "edges:\n"
        "  START --[text, style]--> summarize\n"
        "  summarize --[summary]--> title\n"
        "  START --[style]--> title\n"
        "  title --[title]--> END\n"
    )
    assert workflow.to_mermaid() == (
        "flowchart TD\n"
        '    __start__(["START"])\n'
        '    summarize["summarize"]\n'
        '    title["title"]\n'
        '    __end__(["END"])\n'
        '    __start__ -->|"text, style"| summarize\n'
        '    summarize -->|"summary"| title\n'
        '    __start__ -->|"style"| title\n'
        '    title -->|"title"| __end__\n'
    )
