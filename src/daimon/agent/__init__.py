"""The agent and its run loop."""

from daimon.agent._agent import Agent, SystemPrompt

__all__ = ("Agent", "SystemPrompt")
