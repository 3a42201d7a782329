"""daimon.tools: functions the model can call.

``@tool`` turns a typed Python function into a tool; :class:`ToolRegistry` holds an agent's tools
and runs the model's calls, turning every tool problem into an error result the model can read.
"""

from daimon.tools._client import Elicitation, RunClient
from daimon.tools._context import RunContext
from daimon.tools._decorator import tool
from daimon.tools._function import FunctionTool, UndocumentedToolWarning
from daimon.tools._protocol import Tool
from daimon.tools._registry import ToolRegistry
from daimon.tools._retry import ToolRetryPolicy
from daimon.tools._signals import EndRun, ModelRetry

__all__ = (
    "Elicitation",
    "EndRun",
    "FunctionTool",
    "ModelRetry",
    "RunClient",
    "RunContext",
    "Tool",
    "ToolRegistry",
    "ToolRetryPolicy",
    "UndocumentedToolWarning",
    "tool",
)
