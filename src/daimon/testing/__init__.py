"""Test kits for daimon's protocols: conformance suites and helpers.

Each suite is a base class of tests that a backend's test module subclasses, so every backend is
held to the same contract. Importing this package stays cheap: a kit (and pytest) loads on first
use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports

if TYPE_CHECKING:
    from daimon.testing.brokers import BrokerConformance
    from daimon.testing.checkpoint import CheckpointConformance
    from daimon.testing.limits import LimitStoreConformance
    from daimon.testing.memory import MemoryConformance
    from daimon.testing.models import LoopbackServer, ModelConformance, WireServer
    from daimon.testing.servers import serving
    from daimon.testing.state_store import StateStoreConformance
    from daimon.testing.vectorstores import (
        PersistentVectorStoreConformance,
        VectorStoreConformance,
    )

__all__ = (
    "BrokerConformance",
    "CheckpointConformance",
    "LimitStoreConformance",
    "LoopbackServer",
    "MemoryConformance",
    "ModelConformance",
    "PersistentVectorStoreConformance",
    "StateStoreConformance",
    "VectorStoreConformance",
    "WireServer",
    "serving",
)

# name -> (module, attribute); every kit adds its public names here and above.
_LAZY: dict[str, tuple[str, str]] = {
    "BrokerConformance": ("daimon.testing.brokers", "BrokerConformance"),
    "CheckpointConformance": ("daimon.testing.checkpoint", "CheckpointConformance"),
    "LimitStoreConformance": ("daimon.testing.limits", "LimitStoreConformance"),
    "LoopbackServer": ("daimon.testing.models", "LoopbackServer"),
    "serving": ("daimon.testing.servers", "serving"),
    "MemoryConformance": ("daimon.testing.memory", "MemoryConformance"),
    "ModelConformance": ("daimon.testing.models", "ModelConformance"),
    "PersistentVectorStoreConformance": (
        "daimon.testing.vectorstores",
        "PersistentVectorStoreConformance",
    ),
    "StateStoreConformance": ("daimon.testing.state_store", "StateStoreConformance"),
    "VectorStoreConformance": ("daimon.testing.vectorstores", "VectorStoreConformance"),
    "WireServer": ("daimon.testing.models", "WireServer"),
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
