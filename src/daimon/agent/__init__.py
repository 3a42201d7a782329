"""The agent and its run loop."""

from daimon.agent._agent import Agent, PromptCacheWarning, SystemPrompt

__all__ = ("Agent", "PromptCacheWarning", "SystemPrompt")
