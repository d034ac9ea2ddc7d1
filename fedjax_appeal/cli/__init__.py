"""Command-line front end.

commands (run, list, install-data, reproduce), sweep, compare.
"""

from .commands import main

__all__ = ["main"]
