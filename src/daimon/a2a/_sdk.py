"""Imported first by each module here that uses the SDK.

A missing SDK is then reported as the extra to install (``MissingDependencyError``), not as
whichever of its own dependencies happens to be imported first.
"""

from daimon.core.optional import require

__all__ = ()

require("a2a", extra="a2a")
