"""GenAI client metrics: tokens used and time taken by each model call.

Instruments, names, units and bucket boundaries are those of the OpenTelemetry GenAI semantic
conventions:

* ``gen_ai.client.token.usage`` (histogram, ``{token}``): one record per model call and token
  type (``gen_ai.token.type``: ``input``, ``output``), when the provider reported usage;
* ``gen_ai.client.operation.duration`` (histogram, ``s``): one record per model call, with
  ``error.type`` when it failed.

Both carry ``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.response.model`` (when
the response names one) and ``gen_ai.provider.name`` (when the model says its provider).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from daimon.core.chat import Usage
from daimon.core.optional import require

metrics = require("opentelemetry.metrics", extra="otel")

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

__all__ = ("ClientMetrics", "DURATION_BUCKETS", "TOKEN_BUCKETS")

TOKEN_BUCKETS = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)
"""Bucket boundaries the conventions advise for ``gen_ai.client.token.usage``."""

DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
"""Bucket boundaries (seconds) the conventions advise for ``gen_ai.client.operation.duration``."""

_Attributes: TypeAlias = dict[str, str]


class ClientMetrics:
    """The two GenAI client histograms of one instrumented agent.

    Args:
        meter_provider: Where the measurements go; by default the global provider (a no-op until
            one is set, for instance by :func:`~daimon.telemetry.configure_otlp`).
        version: The instrumentation's version.
        attributes: What every measurement carries (operation, request model, provider).
    """

    __slots__ = ("_attributes", "_duration", "_tokens")

    def __init__(
        self, meter_provider: MeterProvider | None, version: str, attributes: _Attributes
    ) -> None:
        meter = metrics.get_meter("daimon", version, meter_provider)
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._attributes = attributes

    def call(self, seconds: float, usage: Usage, response_model: str | None) -> None:
        """A model call that answered: its duration and, when reported, its tokens."""
        attributes = self._attributes
        if response_model:
            attributes = {**attributes, "gen_ai.response.model": response_model}
        self._duration.record(seconds, attributes)
        if usage.input_tokens or usage.output_tokens or usage.requests:
            self._tokens.record(usage.input_tokens, {**attributes, "gen_ai.token.type": "input"})
            self._tokens.record(usage.output_tokens, {**attributes, "gen_ai.token.type": "output"})

    def failed(self, seconds: float, error_type: str) -> None:
        """A model call that failed (or was cut short): its duration and ``error.type``."""
        self._duration.record(seconds, {**self._attributes, "error.type": error_type})
