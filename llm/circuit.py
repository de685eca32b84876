"""Circuit breakers for model endpoints: stop calling an endpoint that keeps failing.

One breaker per endpoint key (base URL + model), shared by every client in the process and
safe to use from many threads. A breaker is *closed* (calls go through) until ``failures``
consecutive requests fail; it is then *open* for ``cooldown_s`` seconds, during which
``allow()`` is false and callers fail fast without touching the network. After the cooldown it
is *half-open*: exactly one trial request is allowed; its success closes the breaker, its
failure opens it for another cooldown.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"


class CircuitBreaker:
    """The closed/open/half-open state of one endpoint (thread-safe).

    ``failures``: consecutive failed requests that open the breaker (at least 1).
    ``cooldown_s``: seconds the breaker stays open before a trial request.
    ``clock``: monotonic time source in seconds (replaceable in tests).
    """

    def __init__(self, *, failures: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic):
        self.failures = max(1, failures)
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._consecutive = 0
        self._opened_at: float | None = None
        self._trial_running = False

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half-open"`` (cooldown over, trial allowed or running)."""
        with self._lock:
            return self._state()

    def _state(self) -> str:
        if self._opened_at is None:
            return CLOSED
        if self._clock() - self._opened_at < self.cooldown_s:
            return OPEN
        return HALF_OPEN

    def allow(self) -> bool:
        """Whether a request may go out now; in half-open state, true for one caller only.

        A caller that was allowed must report the outcome with ``record_success()`` or
        ``record_failure()``.
        """
        with self._lock:
            state = self._state()
            if state == CLOSED:
                return True
            if state == HALF_OPEN and not self._trial_running:
                self._trial_running = True
                return True
            return False

    def seconds_until_trial(self) -> float:
        """Seconds left before the open breaker allows a trial request (0 when not open)."""
        with self._lock:
            if self._opened_at is None:
                return 0.0
            return max(0.0, self.cooldown_s - (self._clock() - self._opened_at))

    def record_success(self) -> None:
        """The endpoint answered: close the breaker and forget earlier failures."""
        with self._lock:
            self._consecutive = 0
            self._opened_at = None
            self._trial_running = False

    def record_failure(self) -> None:
        """The endpoint failed (timeout, refused, 429, 5xx): count it, open at the threshold.

        A failed half-open trial reopens the breaker for a full cooldown.
        """
        with self._lock:
            self._consecutive += 1
            if self._trial_running or self._consecutive >= self.failures:
                self._opened_at = self._clock()
            self._trial_running = False


_breakers: dict[str, CircuitBreaker] = {}
_registry_lock = threading.Lock()


def circuit_for(key: str, *, failures: int, cooldown_s: float) -> CircuitBreaker:
    """The process-wide breaker of endpoint ``key``, created with these thresholds on first use."""
    with _registry_lock:
        breaker = _breakers.get(key)
        if breaker is None:
            breaker = _breakers[key] = CircuitBreaker(failures=failures, cooldown_s=cooldown_s)
        return breaker


def circuit_reset() -> None:
    """Forget every breaker (all endpoints closed again, thresholds re-read); for tests."""
    with _registry_lock:
        _breakers.clear()
