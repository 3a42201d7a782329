"""What makes a bare graph, DAG or workflow promptable: ``prompt`` and ``prompt_stream``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

from daimon.core.events import StreamEvent
from daimon.core.messages import Message
from daimon.core.results import AgentResponse

if TYPE_CHECKING:
    from daimon.orchestration._promptable import Flow, PromptableFlow

__all__ = ("PromptsAsFlow",)


class PromptsAsFlow:
    """Answers prompts as :class:`~daimon.orchestration.PromptableFlow` does, with its defaults.

    Give the flow to ``PromptableFlow`` to choose how a prompt becomes its input (``input=``) and
    its result the answer (``output=``).
    """

    __slots__ = ()

    async def prompt(self, input: str | Message, /, **options: Any) -> AgentResponse[Any]:
        """Run on the prompt's text; the answer as an agent's response (see ``PromptableFlow``)."""
        return await _promptable(self).prompt(input, **options)

    def prompt_stream(self, input: str | Message, /, **options: Any) -> AsyncIterator[StreamEvent]:
        """Run, streaming as :meth:`PromptableFlow.prompt_stream` does."""
        return _promptable(self).prompt_stream(input, **options)


def _promptable(flow: PromptsAsFlow) -> PromptableFlow:
    from daimon.orchestration._promptable import PromptableFlow

    return PromptableFlow(cast("Flow", flow))
