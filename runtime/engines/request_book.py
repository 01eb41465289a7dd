"""What an executor keeps per request between the loop's calls: its first token and, with ``keep_logits``
(the exactness check), its last-position logits - nothing from its arrival. A wave's chunks carry the
prompt's tokens (``Chunk.tokens``, by reference), so stage 0 reads its input from the wave itself.

A request the loop forgets (done, failed, cancelled) while one of its chunks is executing must not leave
that chunk's results behind: :meth:`RequestBook.running` marks a step's requests for as long as it runs, and
:meth:`RequestBook.forget` of one of them makes its results, when they come, be dropped (:meth:`live`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from wavepp.runtime.planning.step_times import StageFit, StepModel
from wavepp.runtime.request import Chunk


class RequestBook:
    def __init__(self, keep_logits: bool = False) -> None:
        self.keep_logits = keep_logits
        self._first: dict[str, int] = {}
        self._logits: dict[str, Any] = {}
        self._running: Counter[str] = Counter()     # requests with a chunk executing now
        self._gone: set[str] = set()                # of those, forgotten meanwhile

    @contextmanager
    def running(self, chunks: Sequence[Chunk]) -> Iterator[None]:
        """Around one stage step: its requests are running until it ends."""
        ids = [c.request_id for c in chunks]
        self._running.update(ids)
        try:
            yield
        finally:
            self._running.subtract(ids)
            for rid in ids:
                if self._running[rid] <= 0:
                    del self._running[rid]
                    self._gone.discard(rid)

    def live(self, request_id: str) -> bool:
        """Not forgotten while its step ran: its results are kept."""
        return request_id not in self._gone

    def keep_first(self, request_id: str, token: int, logits: Any = None) -> None:
        """A finished request's first token (and logits, when kept), unless it was forgotten meanwhile."""
        if self.live(request_id):
            self._first[request_id] = token
            if logits is not None:
                self._logits[request_id] = logits

    def forget(self, request_id: str) -> None:
        self._first.pop(request_id, None)
        self._logits.pop(request_id, None)
        if request_id in self._running:
            self._gone.add(request_id)

    def first_token(self, request_id: str) -> int | None:
        return self._first.get(request_id)

    def step_prior(self) -> list[StageFit] | None:
        """A real engine knows its step times only by running them: the loop fits them online."""
        return None

    def step_model(self) -> StepModel | None:
        return None

    def logits(self, request_id: str) -> Any:
        """Last-position logits of a finished request (with ``keep_logits``: the exactness check)."""
        return self._logits.get(request_id)

    def clear(self) -> None:
        self._first.clear()
        self._logits.clear()
