"""A paper table as plain data: its settings (columns), arms (rows: an algorithm and its
options), metrics, the paper's reported numbers and notes. `papers.runner.run_table` runs
one; each paper's report module turns the results into files.

Seeds come from the command line (`reproduce NAME --seeds 0,1,2`, the default; a table may
run only the first of them with --quick); runs that share a seed share its data partition,
flipped clients and training keys.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Setting:
    """A dataset setting (a group of table columns)."""

    label: str
    cfg: dict  # RunConfig keys of the full run
    quick: dict | None = None  # RunConfig keys of --quick (None: not run in quick mode)
    hp: dict = dataclasses.field(default_factory=dict)  # HParams of this setting
    # algorithm -> (RunConfig keys, HParams keys) chosen for it in this setting (tuning)
    per_algorithm: dict[str, tuple[dict, dict]] = dataclasses.field(default_factory=dict)

    def spec(self, quick: bool) -> dict | None:
        """The RunConfig keys of this setting (None: not run)."""
        return self.quick if quick else self.cfg

    def tuned(self, algorithm: str) -> tuple[dict, dict]:
        return self.per_algorithm.get(algorithm, ({}, {}))


@dataclasses.dataclass(frozen=True)
class Arm:
    """A row: an algorithm with its options."""

    label: str
    algorithm: str
    hp: dict = dataclasses.field(default_factory=dict)
    cfg: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Table:
    """One paper table (or figure): what to run and what the paper reports.

    A run of (setting, arm, seed) gets the RunConfig keys `base_cfg`, then the setting's,
    its per-algorithm ones, the arm's, then algorithm and seed; HParams `base_hp`, the
    setting's, its per-algorithm ones, then the arm's.
    """

    name: str  # `reproduce NAME`
    help: str  # one line of `reproduce list`
    title: str  # heading of table.md
    settings: tuple[Setting, ...]
    arms: tuple[Arm, ...]
    metrics: tuple[str, ...]  # result keys of the table's columns
    # the paper's numbers: {(setting label, arm label): {metric: number or 'mean ± std'}}
    paper: dict[tuple[str, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
    notes: str = ""
    base_cfg: dict = dataclasses.field(default_factory=dict)
    base_hp: dict = dataclasses.field(default_factory=dict)
    report: dict[str, Any] = dataclasses.field(default_factory=dict)  # report options
    quick_seeds: int | None = None  # --quick runs only the first N seeds (None: all)
    # `reproduce NAME --robustness` (`papers.robustness`): "lrs", the client lrs the arms'
    # lrs were tuned over, each rerun shared by all arms; "metrics", the headline metrics
    # (default: the first of `metrics`); "settings", the setting labels, "arms", the arm
    # labels (default: all).
    # Empty: the table has no robustness mode.
    robustness: dict[str, Any] = dataclasses.field(default_factory=dict)
    # the main claim, which `reproduce NAME --seeds auto` decides: (setting label, metric)
    # of the report's target − best other arm (None: the first setting and the first
    # paired metric)
    claim: tuple[str, str] | None = None

    def seeds(self, seeds: list[int], quick: bool) -> list[int]:
        """The seeds a run of this table uses, of the command's `--seeds`."""
        return list(seeds[:self.quick_seeds]) if quick and self.quick_seeds else list(seeds)
