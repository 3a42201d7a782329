"""Graphs, DAGs and workflows served like agents: a prompt in, an answer out, nodes reported.

::

    from daimon.server import ServedFlow, serve

    serve({"research": ServedFlow(graph, input=lambda text: {"question": text},
                                  output=lambda result: result.state["answer"])})

:class:`ServedFlow` is a :class:`daimon.orchestration.PromptableFlow` (by the name the server
has always used): it says how a prompt becomes the flow's input and its result the
answer (see :mod:`daimon.orchestration._promptable` for the defaults). A bare graph, DAG or
workflow is served with those defaults. Beyond what any promptable gets, a served flow's
``/prompt/stream`` reports its nodes one by one and ``/agents`` draws it.
"""

from __future__ import annotations

from daimon.orchestration import FlowAnswer, PromptableFlow
from daimon.orchestration._promptable import Flow, FlowResult

__all__ = ("Flow", "FlowAnswer", "FlowResult", "ServedFlow")


class ServedFlow(PromptableFlow):
    """A flow that answers prompts: a :class:`daimon.orchestration.PromptableFlow`.

    The server's name for it; it adds nothing, and the server serves either the same way.
    """

    __slots__ = ()
