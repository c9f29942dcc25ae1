"""SIGINT / SIGTERM during a run: stop within a draw or two, never in the middle of a commit.

:class:`SignalGuard` installs handlers (main thread only) that raise the run's :class:`RunInterrupted`;
inside :meth:`SignalGuard.critical` (a commit: samples, then metrics) a signal is held back and raised as
soon as the block ends, so every committed row stays whole on disk.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["RunInterrupted", "RunStopped", "SignalGuard"]


class RunInterrupted(Exception):
    """A run stopped by SIGINT / SIGTERM after its finished rows were committed; ``signum`` says which."""

    def __init__(self, signum: int, done: int = 0, total: int = 0, output_dir: str | None = None) -> None:
        self.signum, self.done, self.total, self.output_dir = signum, done, total, output_dir
        name = signal.Signals(signum).name
        where = f" in {output_dir}" if output_dir else ""
        super().__init__(f"interrupted by {name}: {done} of {total} rows are complete{where}; "
                         "rerun the same command to finish the others")


class RunStopped(SystemExit):
    """The exit of a run stopped by SIGINT / SIGTERM after its finished rows were committed (status 128 + signal)."""


class SignalGuard:
    """SIGINT / SIGTERM handlers raising ``interrupted(signum)``, deferred inside :meth:`critical`.

    Args:
        interrupted: ``signum -> exception`` raised by the handler (the writer's :class:`RunInterrupted`).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, interrupted: Callable[[int], BaseException]) -> None:
        self.interrupted = interrupted
        self._state: dict[str, Any] | None = None

    @property
    def installed(self) -> bool:
        return self._state is not None

    def install(self) -> None:
        """Trap the signals (from the main thread only; elsewhere Python cannot install handlers)."""
        if threading.current_thread() is not threading.main_thread():
            return
        state: dict[str, Any] = {"critical": False, "pending": None, "previous": {}}

        def handler(signum, frame):
            if self._state is not state:  # left installed after the run (restored by someone else)
                prev = state["previous"].get(signum)
                if callable(prev):
                    return prev(signum, frame)
                raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)
            if state["critical"]:
                state["pending"] = signum
                return
            raise self.interrupted(signum)

        for sig in self.SIGNALS:
            state["previous"][sig] = signal.getsignal(sig)
            signal.signal(sig, handler)
        self._state = state

    def restore(self) -> None:
        """Give the signals back to the handlers found at :meth:`install`."""
        state, self._state = self._state, None
        if state is not None:
            for sig, prev in state["previous"].items():
                signal.signal(sig, prev if prev is not None else signal.SIG_DFL)

    @contextmanager
    def critical(self) -> Iterator[None]:
        """A block no signal interrupts: one arriving meanwhile is raised when the block ends."""
        state = self._state
        if state is not None:
            state["critical"] = True
        try:
            yield
        finally:
            if state is not None:
                state["critical"] = False
                if state["pending"] is not None:
                    signum, state["pending"] = state["pending"], None
                    raise self.interrupted(signum)
