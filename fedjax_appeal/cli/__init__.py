"""Command-line front end.

commands (the table of subcommands, the parser, `main` and the entry-point group
`fedjax_appeal.commands` through which other packages add theirs), one module per
subcommand (run, listing, install_data, compare, sweep with sweep_auto and sweep_files),
and what they share: options (the configuration's flags), process (output folder, several
processes, runtime, signals), plugins (--plugin).
"""

import atexit
import os
import sys
import time

STARTED = time.perf_counter()  # the command's wall clock starts before its imports

from ..core.fields import load_option_modules  # noqa: E402

# The built-in options are declared first, in the package's `OPTION_MODULES` order, so that
# `--help`, `list` and the records list them in that order whatever the commands import.
load_option_modules()

from .commands import ENTRY_POINT_GROUP, Subcommand, main  # noqa: E402

__all__ = ["ENTRY_POINT_GROUP", "Subcommand", "console", "main"]


def console() -> None:
    """The `fedjax-appeal` program: `main()`, then exit without the interpreter's teardown.

    Once the command has returned, its files are written and closed; the exit handlers
    still run (trackers, JAX's multi-process shutdown), then the process ends at once: the
    interpreter's own teardown of JAX's runtime took 0.28 s of a 5 s warm FedAvg run.
    """
    code = main(started=STARTED)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
