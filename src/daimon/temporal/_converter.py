"""daimon's versioned JSON codec as a Temporal payload converter: what crosses Temporal.

Every value a workflow or an activity sends (requests, responses, tool calls and results,
the run's answer) is encoded with :func:`daimon.core.codec.to_data` and decoded with
:func:`~daimon.core.codec.from_data` into the type the receiver names, so a payload can only
become the dataclass asked for. Nothing is ever pickled: a value the codec cannot encode (NaN,
an object), or whose payload is over :data:`PAYLOAD_LIMIT`, fails the call with a
:class:`~daimon.core.errors.SerializationError`, which no attempt retries.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    BinaryNullPayloadConverter,
    BinaryPlainPayloadConverter,
    CompositePayloadConverter,
    DataConverter,
    EncodingPayloadConverter,
)

from daimon.core.codec import CODEC_VERSION, from_data, to_data
from daimon.core.errors import SerializationError

__all__ = (
    "DaimonJsonPayloadConverter",
    "DaimonPayloadConverter",
    "PAYLOAD_LIMIT",
    "data_converter",
)

ENCODING = "json/daimon"
"""The payloads' encoding (their ``encoding`` metadata)."""

PAYLOAD_LIMIT = 2 * 1024 * 1024
"""The largest payload, in bytes: the Temporal server's default ``limit.blobSize.error``.

A larger one is refused when it is made, rather than by the server after the call ran."""


class DaimonJsonPayloadConverter(EncodingPayloadConverter):
    """JSON through daimon's codec, tagged with the codec's version."""

    @property
    def encoding(self) -> str:
        """The ``encoding`` metadata of the payloads it writes and reads."""
        return ENCODING

    def to_payload(self, value: Any) -> Payload | None:
        """``value`` as a payload (a daimon dataclass, or plain JSON data).

        Raises:
            SerializationError: JSON cannot hold ``value`` (NaN, an object), or its payload
                would be over :data:`PAYLOAD_LIMIT`.
        """
        try:
            data = json.dumps(to_data(value), separators=(",", ":"), allow_nan=False)
        except SerializationError:
            raise
        except ValueError as exc:  # NaN or an infinity
            raise SerializationError(f"cannot encode as JSON: {exc}") from None
        payload = Payload(
            metadata={"encoding": ENCODING.encode(), "daimon": str(CODEC_VERSION).encode()},
            data=data.encode(),
        )
        size = payload.ByteSize()
        if size > PAYLOAD_LIMIT:
            raise SerializationError(
                f"a value of {size:,} bytes is over Temporal's payload limit of "
                f"{PAYLOAD_LIMIT:,} bytes: keep large data outside the run and pass a reference"
            )
        return payload

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        """The payload as ``type_hint`` (plain JSON data without one)."""
        version = payload.metadata.get("daimon", b"").decode()
        if version != str(CODEC_VERSION):
            raise SerializationError(
                f"a Temporal payload in codec version {version or '(none)'}; "
                f"this daimon reads version {CODEC_VERSION}"
            )
        try:
            data = json.loads(payload.data)
        except ValueError as exc:
            raise SerializationError(f"a Temporal payload is not JSON: {exc}") from None
        if type_hint is None or type_hint is Any:
            return data
        return from_data(type_hint, data)


class DaimonPayloadConverter(CompositePayloadConverter):
    """``None`` and ``bytes`` as Temporal's own encodings; every other value through the codec."""

    def __init__(self) -> None:
        super().__init__(
            BinaryNullPayloadConverter(),
            BinaryPlainPayloadConverter(),
            DaimonJsonPayloadConverter(),
        )


data_converter = DataConverter(payload_converter_class=DaimonPayloadConverter)
"""The data converter daimon's clients and workers use: pass it to ``Client.connect``."""
