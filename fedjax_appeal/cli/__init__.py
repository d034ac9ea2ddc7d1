"""Command-line front end.

commands (run, list, install-data; the table of subcommands and the entry-point group
`fedjax_appeal.commands` through which other packages add theirs), sweep, compare.
"""

from .commands import ENTRY_POINT_GROUP, Subcommand, main

__all__ = ["ENTRY_POINT_GROUP", "Subcommand", "main"]
