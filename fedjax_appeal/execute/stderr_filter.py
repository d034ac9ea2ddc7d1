"""Helper process of a multi-process run: filters the run's stderr (see
`distributed._filter_stderr`).

Reads the run's stderr line by line from stdin and writes it to stdout (the terminal or
log the run's stderr went to). Lines pass unchanged until the JAX runtime logs its first
error or fatal line (absl format `E1123 23:58:05.194063 ...` / `F...`, a warning about
the coordination service, or a C++ `terminate called`), which happens when another
process of the job died. From then on only this program's own lines (`fedjax-appeal:
...`, progress lines `[...]`) pass, and when the run's process has ended without saying
why itself, one line does:

    fedjax-appeal: error: another process of this job stopped (...); no results written; ...

A line starting with `distributed.ADVICE_TAG` carries that advice (where the checkpoint
is) and is not shown.
"""

from __future__ import annotations

import re
import signal
import sys

ADVICE_TAG = "\x00fedjax-appeal-advice:"  # = distributed.ADVICE_TAG (no jax import here)
RUNTIME_ERROR = re.compile(r"^(?:([EFW])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ?(.*)|"
                           r"terminate called.*)$")
# A warning starts the quiet mode only when it is about the runtime losing a process.
LOST = ("coordination service", "UNAVAILABLE", "heartbeat")
# A runtime log line that another thread wrote into the middle of a line of this program.
EMBEDDED = re.compile(r"(?<=\S)(?=[EFWI]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\])")


def split_lines(raw: str) -> list[str]:
    """`raw` without its newline, split where a runtime log line starts inside it."""
    return EMBEDDED.split(raw.rstrip("\n"))


def summarize(detail: str) -> str:
    """The first sentence of the runtime's message, shortened."""
    text = detail.strip() or "the JAX distributed runtime stopped this process"
    return text.split(". ")[0][:200]


def run(inp, out) -> None:
    """Copy `inp` to `out` line by line with the filtering described above."""
    advice, reason, fatal_reason, quiet, said = "", "", "", False, False
    for line in (part for raw in inp for part in split_lines(raw)):
        if line.startswith(ADVICE_TAG):
            advice = line[len(ADVICE_TAG):]
            continue
        m = RUNTIME_ERROR.match(line)
        if m and (m.group(1) != "W" or any(w in line for w in LOST)):
            quiet = True
            if m.group(1) == "F" and not fatal_reason:
                fatal_reason = m.group(2) or line
            if m.group(1) != "W":
                reason = reason or m.group(2) or line
            continue
        if line.startswith("fedjax-appeal: error:"):
            said = True
        if not quiet or line.startswith(("fedjax-appeal:", "[")):
            out.write(line + "\n")
            out.flush()
    if quiet and not said:
        out.write("fedjax-appeal: error: another process of this job stopped ("
                  + summarize(fatal_reason or reason) + "); no results written"
                  + (f"; {advice}" if advice else "") + "\n")
        out.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle
    run(sys.stdin, sys.stdout)
