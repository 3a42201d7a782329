"""daimon.kit: the backend kit, helpers for writing a plugin.

:mod:`daimon.core` is the contract a backend implements (types, protocols, errors, codec). The kit
is shared implementation that backends may use, and need not: record formats, checks, base classes
and mixins, SDK client support. It imports the standard library and :mod:`daimon.core` only, so a
plugin may import it as well as core. Import its modules directly (``daimon.kit.vectors``, ...);
the package itself exports nothing.

=================================  ===========================================================
``daimon.kit.checks``              positive-integer settings checks, shared by every component
``daimon.kit.lifecycle``           ``AsyncClosing`` / ``SetupOnEnter`` mixins, serving helpers
``daimon.kit.streaming``           stream accumulation, events from a whole response
``daimon.kit.sdk_support``         per-loop SDK clients, retry-after, usage and stop mappings
``daimon.kit.tokens``              ``CharacterTokenCounter`` and message token counting
``daimon.kit.filters``             the vector-store filter language: parser and reference matcher
``daimon.kit.vectors``             vector store input checks and ``VectorStoreBase``
``daimon.kit.memory_records``      the message encoding memory backends store
``daimon.kit.checkpoint_records``  the checksummed checkpoint record and ``BaseCheckpoint``
``daimon.kit.task_records``        the broker state machine, record stores and dead letters
=================================  ===========================================================
"""

from __future__ import annotations

__all__ = ()
