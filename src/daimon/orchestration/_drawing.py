"""Drawings of graphs, DAGs and workflows: Mermaid flowcharts and plain-text listings."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from daimon.orchestration._common import END, START

__all__ = ("Edge", "mermaid", "text")

_TERMINALS = {START: "START", END: "END"}
_SAFE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Edge:
    """One arrow: dashed arrows are routes a node may pick at run time."""

    source: str
    target: str
    label: str = ""
    dashed: bool = False


def _ordered_nodes(nodes: Sequence[str], edges: Sequence[Edge]) -> list[str]:
    """START first, then the nodes, then END, each terminal only when an edge uses it."""
    used = {edge.source for edge in edges} | {edge.target for edge in edges}
    head = [START] if START in used else []
    tail = [END] if END in used else []
    return [*head, *nodes, *tail]


def _ids(names: Sequence[str]) -> dict[str, str]:
    """Mermaid ids: the name when it is a plain identifier (not ``end``), else ``node_<n>``."""
    ids: dict[str, str] = {}
    taken = set(names)
    counter = 0
    for name in names:
        if _SAFE_ID.fullmatch(name) and name.lower() != "end":
            ids[name] = name
            continue
        while f"node_{counter}" in taken:
            counter += 1
        ids[name] = f"node_{counter}"
        taken.add(ids[name])
    return ids


def _quote(text: str) -> str:
    return '"' + text.replace('"', "#quot;") + '"'


def mermaid(nodes: Sequence[str], edges: Sequence[Edge]) -> str:
    """A Mermaid ``flowchart TD``: START and END as stadiums, dashed arrows for dynamic routes."""
    names = _ordered_nodes(nodes, edges)
    ids = _ids(names)
    lines = ["flowchart TD"]
    for name in names:
        if name in _TERMINALS:
            lines.append(f"    {ids[name]}([{_quote(_TERMINALS[name])}])")
        else:
            lines.append(f"    {ids[name]}[{_quote(name)}]")
    for edge in edges:
        arrow = "-.->" if edge.dashed else "-->"
        label = f"|{_quote(edge.label)}|" if edge.label else ""
        lines.append(f"    {ids[edge.source]} {arrow}{label} {ids[edge.target]}")
    return "\n".join(lines) + "\n"


def text(kind: str, name: str, nodes: Sequence[str], edges: Sequence[Edge]) -> str:
    """A plain-ASCII listing: a title, the nodes, then one line per edge (``a --[label]--> b``)."""
    lines = [f"{kind} {name!r}: {len(nodes)} nodes, {len(edges)} edges", "nodes:"]
    lines += [f"  {name}" for name in nodes] or ["  (none)"]
    lines.append("edges:")
    for edge in edges:
        source = _TERMINALS.get(edge.source, edge.source)
        target = _TERMINALS.get(edge.target, edge.target)
        line = "." if edge.dashed else "-"
        arrow = f"{line * 2}[{edge.label}]{line * 2}>" if edge.label else f"{line * 2}>"
        lines.append(f"  {source} {arrow} {target}")
    if not edges:
        lines.append("  (none)")
    return "\n".join(lines) + "\n"
