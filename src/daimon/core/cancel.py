"""Cooperative cancellation of runs."""

from __future__ import annotations

from collections.abc import Callable

from daimon.core.errors import RunCancelled

__all__ = ("CancelToken",)


class CancelToken:
    """Cancels the runs it is given to.

    A run checks the token before each iteration and, while it waits on a model or tools, is
    interrupted at once through a callback. Safe to cancel from the event loop's thread; from
    another thread use ``loop.call_soon_threadsafe(token.cancel)``.
    """

    __slots__ = ("_callbacks", "_reason", "cancelled")

    def __init__(self) -> None:
        self.cancelled = False
        self._reason: str | None = None
        self._callbacks: list[Callable[[], object]] = []

    @property
    def reason(self) -> str | None:
        """Why the token was cancelled, if a reason was given."""
        return self._reason

    def cancel(self, reason: str | None = None) -> None:
        """Cancel every run using this token. Idempotent."""
        if self.cancelled:
            return
        self.cancelled = True
        self._reason = reason
        callbacks, self._callbacks = self._callbacks, []
        # Every callback runs even if one raises: each interrupts a different waiter.
        errors: list[Exception] = []
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup("cancel callbacks failed", errors)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`RunCancelled` if the token was cancelled."""
        if self.cancelled:
            raise RunCancelled(self._reason)

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback`` when cancelled (at once if already); returns a function to detach it.

        If callbacks raise, the others still run; then the error (or an :class:`ExceptionGroup`
        of them) propagates from :meth:`cancel`.
        """
        if self.cancelled:
            callback()
            return _noop
        self._callbacks.append(callback)

        def detach() -> None:
            # Not contextlib.suppress(): it costs 0.7-0.8 µs a run (3%; benchmarks/micro_ab.py).
            try:  # noqa: SIM105
                self._callbacks.remove(callback)
            except ValueError:  # already detached, or the token fired (it empties its list)
                pass

        return detach


def _noop() -> None:
    return None
