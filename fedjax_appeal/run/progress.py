"""Progress lines while long work runs, without touching the work.

A compiled chunk of rounds, an XLA compile, the solo models' program or a data load can
each take minutes, and none of them can report from inside without a host callback (which
would add a sync to every round and keep the program out of XLA's persistent cache). So the
work itself stays as it is, and a `Heartbeat` watches it from a thread of its own: the code
names the phase it is in (`with heartbeat.phase("compiling the evaluation program"):`), and
whenever a phase has gone on for `every` seconds (10 by default) without a line, the
heartbeat writes one, naming the phase, how long it has run and, for training, the round
and the time left:

    fedjax-appeal: training rounds 4-6 of 6: 10 s so far, about 8 s a round; round ~4/6,
    about 14 s left      (one line)

Compiles release Python's lock while XLA works, and a running program does too, so the
thread is free to write; the work runs exactly as without it (same programs, same
numbers). One line per update: the lines go to stderr, terminal or not, each ending in a
newline (a log file reads as the terminal did).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

# seconds of work after which a phase gets a line (a "silent stretch" is at most this long)
EVERY = 10.0
POLL = 0.25  # seconds between the heartbeat thread's looks at the clock


def duration(seconds: float) -> str:
    """'40 s', '2.5 min', '1.2 h': a span of time in one short unit."""
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class Heartbeat:
    """Writes a line through `say`, naming the current phase, whenever `every` seconds
    have passed since the last line while a phase runs.

    Use it as a context manager (the thread runs inside the `with`), and name phases with
    `phase` (nestable: the innermost one is reported; `scope` prefixes the lines of the
    phases inside it, e.g. a sweep batch's label). A phase is a text, or a function of the
    seconds it has lasted returning the text (for a round count and a time left that move).
    `mark()` says a line was just written by other means (a progress line per evaluation),
    so that the next heartbeat waits `every` seconds from then. Between phases the line
    names `idle` (what a command does between the steps it names; None: no line).
    """

    def __init__(self, say: Callable[[str], None], every: float | None = None,
                 poll: float | None = None, clock: Callable[[], float] = time.monotonic,
                 idle: str | None = "working"):
        self._say, self._clock = say, clock
        self.every = EVERY if every is None else every  # None: the module's EVERY, POLL
        self._poll = POLL if poll is None else poll
        self._lock = threading.Lock()
        self._phases: list[tuple[str | Callable[[float], str], float]] = []
        self._prefix: list[str] = []
        self._last = self._idle_since = clock()
        self._idle = idle
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lines = 0  # heartbeat lines written

    def __enter__(self) -> Heartbeat:
        self._last = self._idle_since = self._clock()
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="fedjax-appeal-heartbeat",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def say(self, msg: str) -> None:
        """Write a line now (and count it as the latest line)."""
        with self._lock:
            self._say(msg)
            self._last = self._clock()

    def mark(self) -> None:
        """A line was just written by other means."""
        with self._lock:
            self._last = self._clock()

    @contextlib.contextmanager
    def phase(self, what: str | Callable[[float], str]) -> Iterator[None]:
        with self._lock:
            self._phases.append((what, self._clock()))
        try:
            yield
        finally:
            with self._lock:
                self._phases.pop()
                self._idle_since = self._clock()

    @contextlib.contextmanager
    def scope(self, prefix: str) -> Iterator[None]:
        with self._lock:
            self._prefix.append(prefix)
        try:
            yield
        finally:
            with self._lock:
                self._prefix.pop()

    def beat(self) -> bool:
        """Write the current phase's line if it is due; returns whether one was written.
        (The thread calls this every `poll` seconds; tests call it with a fake clock.)"""
        with self._lock:
            now = self._clock()
            if now - self._last < self.every or not (self._phases or self._idle):
                return False
            what, since = (self._phases[-1] if self._phases else
                           (self._idle, self._idle_since))
            text = (what(now - since) if callable(what) else
                    f"{what}: {duration(now - since)} so far")
            self._say("".join(self._prefix) + text)
            self._last = now
            self.lines += 1
            return True

    def _watch(self) -> None:
        while not self._stop.wait(self._poll):
            try:
                self.beat()
            except Exception:  # noqa: BLE001 - a progress line must never stop the work
                pass


def phase(heartbeat: Heartbeat | None, what: str | Callable[[float], str]):
    """`heartbeat.phase(what)`, or nothing without a heartbeat."""
    return contextlib.nullcontext() if heartbeat is None else heartbeat.phase(what)


def scope(heartbeat: Heartbeat | None, prefix: str):
    """`heartbeat.scope(prefix)`, or nothing without a heartbeat."""
    return contextlib.nullcontext() if heartbeat is None else heartbeat.scope(prefix)


def training(start: int, stop: int, total: int, pace: float | None, eval_s: float,
             evals_left: int) -> Callable[[float], str]:
    """The phase text of a chunk of rounds start+1 .. stop of `total` that has run for some
    seconds: with a pace (seconds a round, measured on earlier chunks) the round it has
    about reached and the time left of the run (rounds and evaluations to come)."""
    def text(elapsed: float) -> str:
        head = f"training rounds {start + 1}-{stop} of {total}: {duration(elapsed)} so far"
        if not pace:
            return head + (" (no pace before the first chunk ends; --eval-every 1 reports "
                           "each round)" if stop - start > 1 else "")
        at = min(stop, start + int(elapsed / pace))
        left = max(0.0, (total - start) * pace - elapsed) + evals_left * eval_s
        return (head + f", about {duration(pace)} a round; round ~{at}/{total}, about "
                f"{duration(left)} left")

    return text
