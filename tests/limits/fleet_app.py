"""The agent the fleet tests serve and run in workers: one model call to the fake provider.

Not a test module: the fleet tests put this folder on the ``PYTHONPATH`` of each ``daimon``
process and name the provider in its environment: ``FLEET_PROVIDER`` (its root URL),
``FLEET_PROCESS`` (this process's name, sent in the path so the provider can tell processes
apart) and ``FLEET_MODEL`` (the model name, unique per test: the limiter's key).
"""

from __future__ import annotations

import os

from daimon import Agent
from daimon.models.openai import OpenAIModel
from daimon.models.retry import RetryingModel

_root = os.environ.get("FLEET_PROVIDER", "http://127.0.0.1:9")
_process = os.environ.get("FLEET_PROCESS", "-")

model = OpenAIModel(
    os.environ.get("FLEET_MODEL", "gpt-fleet"),
    api_key="sk-fake",
    base_url=f"{_root}/p/{_process}/v1",
    timeout=30.0,
)

agent = Agent(
    RetryingModel(model, max_attempts=10, initial_backoff=0.2, max_backoff=2.0),
    name="fleet",
    max_tokens=50,
)
