"""MemoryLimitStore against the limit-store conformance suite."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from daimon.core.limits import LimitStore
from daimon.limits import MemoryLimitStore
from daimon.testing.limits import LimitStoreConformance


class TestMemoryLimitStore(LimitStoreConformance):
    @pytest.fixture
    def make_store(self) -> Callable[..., Awaitable[LimitStore]]:
        """One store per set of options: every handle with the same options is that store."""
        stores: dict[tuple[tuple[str, Any], ...], MemoryLimitStore] = {}

        async def make(**options: Any) -> LimitStore:
            found = tuple(sorted(options.items()))
            if found not in stores:
                stores[found] = MemoryLimitStore(**options)
            return stores[found]

        return make
