"""OTLP/HTTP export of spans and metrics, configured by the standard ``OTEL_*`` variables."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from daimon.core.errors import BuilderError
from daimon.core.optional import require

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

__all__ = ("configure_otlp",)

_OFFERED = ("otlp", "console", "none")


def configure_otlp(*, service_name: str | None = None) -> SdkTracerProvider:
    """Export spans and metrics over OTLP/HTTP, configured by the standard ``OTEL_*`` variables.

    Sets (and returns) the global tracer provider: an SDK provider batching spans to an
    ``OTLPSpanExporter``, which reads ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), ``OTEL_EXPORTER_OTLP_HEADERS``, ``..._TIMEOUT`` and
    ``..._COMPRESSION``; the resource comes from ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES``; sampling from ``OTEL_TRACES_SAMPLER``;
    ``OTEL_TRACES_EXPORTER`` may name ``otlp`` (the default), ``console`` or ``none``; and
    ``OTEL_SDK_DISABLED=true`` turns telemetry off. Call it once, early, and call the provider's
    ``shutdown()`` before the process exits, so the last spans are sent.

    It also sets the global meter provider, for the GenAI metrics of instrumented agents: an SDK
    provider with the same resource, exporting every ``OTEL_METRIC_EXPORT_INTERVAL`` ms (60 s by
    default) to an ``OTLPMetricExporter`` (``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` and the other
    ``..._METRICS_...`` variables override the shared ones). ``OTEL_METRICS_EXPORTER`` chooses
    as ``OTEL_TRACES_EXPORTER`` does. The meter provider exports what is left when the process
    exits, or when ``opentelemetry.metrics.get_meter_provider().shutdown()`` is called.

    Args:
        service_name: ``service.name`` when ``OTEL_SERVICE_NAME`` does not set one.

    Raises:
        BuilderError: The environment asks for an exporter or OTLP protocol this does not offer
            (only ``http/protobuf``).
    """
    sdk_trace = require("opentelemetry.sdk.trace", extra="otel")
    sdk_export = require("opentelemetry.sdk.trace.export", extra="otel")
    resources = require("opentelemetry.sdk.resources", extra="otel")
    exporter = require("opentelemetry.exporter.otlp.proto.http.trace_exporter", extra="otel")
    trace = require("opentelemetry.trace", extra="otel")
    span_exporters = _exporters("TRACES")
    metric_exporters = _exporters("METRICS")
    attributes: dict[str, str] = {}
    named_by_env = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    if service_name and not named_by_env:
        attributes["service.name"] = service_name
    resource = resources.Resource.create(attributes)
    provider: SdkTracerProvider = sdk_trace.TracerProvider(resource=resource)
    for name in span_exporters:
        if name == "otlp":
            span_exporter = exporter.OTLPSpanExporter()
        elif name == "console":
            span_exporter = sdk_export.ConsoleSpanExporter()
        else:
            continue
        provider.add_span_processor(sdk_export.BatchSpanProcessor(span_exporter))
    trace.set_tracer_provider(provider)
    _configure_metrics(resource, metric_exporters)
    return provider


def _configure_metrics(resource: Resource, names: list[str]) -> None:
    """Set the global meter provider, reading periodically into the exporters named."""
    metrics = require("opentelemetry.metrics", extra="otel")
    sdk_metrics = require("opentelemetry.sdk.metrics", extra="otel")
    sdk_export = require("opentelemetry.sdk.metrics.export", extra="otel")
    readers = []
    for name in names:
        if name == "otlp":
            exporter = require(
                "opentelemetry.exporter.otlp.proto.http.metric_exporter", extra="otel"
            )
            metric_exporter = exporter.OTLPMetricExporter()
        elif name == "console":
            metric_exporter = sdk_export.ConsoleMetricExporter()
        else:
            continue
        readers.append(sdk_export.PeriodicExportingMetricReader(metric_exporter))
    metrics.set_meter_provider(sdk_metrics.MeterProvider(resource=resource, metric_readers=readers))


def _exporters(signal: str) -> list[str]:
    """The exporters ``OTEL_<signal>_EXPORTER`` names (``otlp`` by default), checked."""
    variable = f"OTEL_{signal}_EXPORTER"
    names = [n.strip().lower() for n in os.environ.get(variable, "otlp").split(",") if n.strip()]
    unknown = sorted(set(names) - set(_OFFERED))
    if unknown:
        raise BuilderError(
            f"{variable} names {unknown}: configure_otlp offers otlp, console and none"
        )
    protocol = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if "otlp" in names and protocol.strip() != "http/protobuf":
        raise BuilderError(
            f"OTLP protocol {protocol!r} is not offered: configure_otlp exports http/protobuf"
        )
    return names
