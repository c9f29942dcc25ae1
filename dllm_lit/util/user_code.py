"""Calling code the project does not own (a user's sampler): it may not end the process, and it may be timed.

:func:`user_code` wraps one call:

* ``SystemExit``, ``KeyboardInterrupt`` or ``GeneratorExit`` raised inside it would otherwise end ``conform`` with
  status 0 ("conforms") and no verdict, or ``predict`` with status 0 and an incomplete ``metrics.json``; they
  become a :class:`UserCodeError` (one line naming the code and what it raised).
* ``timeout`` seconds: a ``SIGALRM`` timer (``setitimer``) raises inside the call when the time is up, again
  every second until the call returns, as an exception that ``except Exception`` in the user's code does not
  catch; it becomes a :class:`UserCodeError` naming the limit.  Python runs the handler between bytecodes, so a
  single long native operation (one huge matrix product) ends when it returns.  Timers need the main thread:
  elsewhere the call runs without a limit.  Nested limits share the one timer (the earliest deadline fires).
"""
from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["UserCodeError", "user_code"]

#: seconds between two expiry signals once a limit is exceeded (should the first one be swallowed)
REPEAT_SECONDS = 1.0


class UserCodeError(ValueError):
    """The user's code ended the process, was interrupted by itself, or ran past its time limit (one line)."""


class _Expired(BaseException):
    """Raised by the timer inside the user's code (a BaseException: ``except Exception`` does not swallow it)."""

    def __init__(self, entry: list[Any]) -> None:
        super().__init__("time limit exceeded")
        self.entry = entry


_active: list[list[Any]] = []  # [deadline (monotonic s), previous SIGALRM handler or None]
_previous: list[Any] = []


def _on_alarm(signum: int, frame: Any) -> None:
    now = time.monotonic()
    due = [e for e in _active if e[0] <= now]
    if due:
        raise _Expired(min(due, key=lambda e: e[0]))
    _arm()


def _arm() -> None:
    """Point the one timer at the earliest deadline (or stop it and restore the previous handler)."""
    if not _active:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if _previous:
            signal.signal(signal.SIGALRM, _previous.pop())
        return
    if not _previous:
        _previous.append(signal.signal(signal.SIGALRM, _on_alarm))
    wait = max(min(e[0] for e in _active) - time.monotonic(), 1e-3)
    signal.setitimer(signal.ITIMER_REAL, wait, REPEAT_SECONDS)


@contextmanager
def user_code(who: str, timeout: float | None = None, field: str = "timeout",
              error: type[Exception] = UserCodeError) -> Iterator[None]:
    """Run the block as the user's code ``who`` (module docstring); failures raise ``error`` in one line."""
    if timeout is not None and not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
                                    and 0 < timeout < float("inf")):
        raise ValueError(f"{field} must be a finite number of seconds > 0 or null, got {timeout!r}")
    entry = None
    if timeout is not None and threading.current_thread() is threading.main_thread():
        entry = [time.monotonic() + float(timeout)]
        _active.append(entry)
        _arm()
    try:
        yield
    except _Expired as exc:
        if exc.entry is not entry:
            raise  # an enclosing limit
        raise error(f"{who} did not finish within {timeout:g} s ({field})") from None
    except (SystemExit, KeyboardInterrupt, GeneratorExit) as exc:
        code = f"({exc.code!r})" if isinstance(exc, SystemExit) else ""
        raise error(f"{who} raised {type(exc).__name__}{code}: the user's code may not end the run; "
                    "nothing is counted as a result") from None
    finally:
        if entry is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)  # no expiry while the deadline is taken off
            _active.remove(entry)
            _arm()
