"""`fedjax-appeal list`: the names of every registry (built-ins and plugins) and the lists
the subcommands add (e.g. reproduce's experiments)."""

from __future__ import annotations

import argparse

from ..core.tunables import TUNABLES
from ..protocols.appeal.appeal import APPEAL_DEFS
from ..run.tracking import KINDS
from .commands import Subcommand, listings
from .options import registries


def subcommand() -> Subcommand:
    return Subcommand(lambda p: None, cmd_list,
                      "list algorithms, datasets, partitions, models", computes=False)


def cmd_list(args: argparse.Namespace) -> int:
    reg = registries()
    for label, key in (("algorithms", "algorithm"), ("datasets", "dataset"),
                       ("partitions", "partition"), ("models", "model"),
                       ("server opts", "server_opt"), ("selectors", "selector"),
                       ("aggregations", "aggregation")):
        print(f"{label + ':':<13} " + ", ".join(reg[key].choices()))
    print(f"{'tunables:':<13} " + (", ".join(f"{k} (default {t.default:g})"
                                           for k, t in TUNABLES.items()) or "none registered"))
    print(f"{'appeal defs:':<13} " + ", ".join(APPEAL_DEFS))
    print(f"{'trackers:':<13} " + ", ".join(KINDS))
    for label, names in listings().items():  # lists of the command modules (experiments)
        print(f"{label + ':':<13} " + ", ".join(names()))
    return 0

