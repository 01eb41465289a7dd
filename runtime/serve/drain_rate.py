"""How fast the admission queue drains: the rate a 429's ``Retry-After`` is computed from.

Answers per second of wall clock say how busy the server was, not how fast it serves: after a
quiet spell a few answers over 30 s give a rate of 0.1/s, and a burst that the server clears in
0.7 s would be told to come back in 40 s. :class:`DrainRate` counts only the time the server had
requests outstanding - the span the answers actually took::

    rate = n / (Σ_{i=1..n} (t_i − max(t_{i−1}, b_i)) + open)

over the last ``n`` (at most :data:`NUM_ANSWERS`) answers at ``t_1 < … < t_n``, where ``b_i`` is
when the server last went from idle (nothing outstanding) to busy before ``t_i`` (``t_0 = −∞``:
an answer after an idle spell counts from the arrival that ended it), and ``open = now −
max(t_n, b)`` while requests are outstanding, else 0 - so a server that stops answering sees its
rate fall instead of keeping the last good one.
"""

from __future__ import annotations

from collections import deque

NUM_ANSWERS = 64           # answers the rate is measured over: recent, yet more than one wave's worth
MIN_BUSY_S = 1e-3          # answers that all came at once (one wave) still have a finite rate


class DrainRate:
    """Requests answered per busy second over the last ``num_answers`` answers (formula above)."""

    def __init__(self, num_answers: int = NUM_ANSWERS) -> None:
        self._busy_s: deque[float] = deque(maxlen=num_answers)   # per answer: busy seconds since the one before
        self._last: float | None = None          # the last answer's time
        self._busy_from: float | None = None     # when the current busy spell began (None: idle so far)

    def busy(self, t: float) -> None:
        """A request arrived at a server with nothing outstanding: a busy spell begins at ``t``."""
        self._busy_from = t

    def note(self, t: float) -> None:
        """A request was answered at ``t``."""
        self._busy_s.append(max(0.0, t - self._since(t)))
        self._last = t

    def per_s(self, t: float, busy: bool) -> float | None:
        """The rate at ``t`` (``busy``: requests are outstanding now); None before any answer."""
        if not self._busy_s:
            return None
        open_s = max(0.0, t - self._since(t)) if busy else 0.0
        return len(self._busy_s) / max(MIN_BUSY_S, sum(self._busy_s) + open_s)

    def _since(self, t: float) -> float:
        """Where the busy time up to ``t`` starts: the last answer, or a later busy start (``t``
        itself when neither is known: no busy time to count)."""
        return max((m for m in (self._last, self._busy_from) if m is not None), default=t)
