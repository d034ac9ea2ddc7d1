"""`reproduce NAME --robustness` for experiments whose arms already share one client lr
(FedNova, FedBuff, the selection tables): does the claimed direction hold at other lrs?

Such a table runs every arm at one client lr, so its direction cannot come from per-arm
tuning, but it may depend on the lr chosen. This mode reruns the whole experiment at each
lr of `SharedLr.lrs` (every run's client lr replaced, `Context.client_lr`), into
`<cache>/shared-lr/NAME/lr-X` (the table's folder keeps only the summary), and reads each
claim's paired per-seed differences from the rerun's `results.json` (the record at
`Claim.path`, as `papers.pairs.paired` writes it). At the table's own lr the table's
`results.json` in its folder is used when present (the same runs).

A claim holds at an lr when the verdict of its per-seed differences under the paper's sign
(`Claim.want`) is "held" (`papers.pairs.verdict_of`); the verdict text is
`papers.robustness.verdict`'s ("held at k of n shared lrs", with the table's lr as the
"tuned" one). Output, into the table's folder:
`robustness.md` and `robustness.json`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from papers import pairs
from papers.reproduce import Context, markdown_table, run_cache
from papers.robustness import verdict


@dataclasses.dataclass(frozen=True)
class Claim:
    """One direction of a table: where its paired record is, and the paper's sign."""

    path: str  # "/"-separated keys of results.json to {"diffs": [...], "signs": "+-0"}
    want: str  # "+" or "-"
    label: str  # how the scorecard names it


@dataclasses.dataclass(frozen=True)
class SharedLr:
    """The shared-lr check of an experiment whose arms share one client lr."""

    table_lr: float  # the lr the table runs every arm at
    lrs: tuple[float, ...]  # the grid (contains table_lr)
    claims: tuple[Claim, ...]
    options: dict[str, str] = dataclasses.field(default_factory=dict)  # forced `--set`s
    note: str = ""  # what the rerun covers, for the report

    def check(self, ctx: Context, fn: Callable[[Context], None]) -> None:
        """`reproduce NAME --robustness` of experiment `fn` (`run_shared_lr`)."""
        run_shared_lr(ctx, fn, self)


def lookup(data: dict, path: str) -> dict | None:
    """The record at `path` in `data` (keys separated by "/"), or None."""
    node: Any = data
    for key in path.split("/"):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, dict) and "diffs" in node else None


def judge(rec: dict | None, want: str) -> dict[str, Any]:
    """{"diffs", "signs", "held"} of one claim at one lr (held: the verdict of the
    differences under `want` is "held", `papers.pairs.verdict_of`)."""
    if rec is None:
        return {"diffs": [], "signs": "", "held": False}
    signs = rec.get("signs") or "".join(pairs.sign(d) for d in rec["diffs"])
    return {"diffs": [float(d) for d in rec["diffs"]], "signs": signs,
            "held": pairs.held(rec["diffs"], want)}


def rerun_dir(ctx: Context, lr: float) -> Path:
    return run_cache(ctx.cache_dir).parent / "shared-lr" / ctx.name / f"lr-{lr:g}"


def results_at(ctx: Context, fn: Callable[[Context], None], spec: SharedLr,
               lr: float) -> tuple[dict, str]:
    """results.json of the experiment at one shared lr, and where it came from."""
    own = ctx.out / "results.json"
    if lr == spec.table_lr and own.is_file():
        return json.loads(own.read_text()), "the table's own run"
    sub = dataclasses.replace(ctx, out=rerun_dir(ctx, lr), robustness=False, client_lr=lr,
                              options={**ctx.options, **spec.options})
    ctx.log(f"client lr {lr:g} for every run: the whole experiment into {sub.out}")
    fn(sub)
    return json.loads((sub.out / "results.json").read_text()), "rerun"


def run_shared_lr(ctx: Context, fn: Callable[[Context], None], spec: SharedLr) -> None:
    """Rerun `fn` at every lr of `spec`, judge its claims and write the report."""
    got = {lr: results_at(ctx, fn, spec, lr) for lr in spec.lrs}
    rows, verdicts, absent = [], [], []
    for c in spec.claims:
        if all(lookup(data, c.path) is None for data, _ in got.values()):
            absent.append(c.label)  # e.g. a dataset this invocation did not run
            continue
        per_lr = {lr: judge(lookup(data, c.path), c.want) for lr, (data, _) in got.items()}
        v = verdict([per_lr[lr]["held"] for lr in spec.lrs], per_lr[spec.table_lr]["held"])
        verdicts.append({"claim": c.label, "path": c.path, "want": c.want,
                         "per_lr": {str(lr): j for lr, j in per_lr.items()}, **v})
        for lr in spec.lrs:
            j = per_lr[lr]
            d = np.asarray(j["diffs"], np.float64)
            rows.append([c.label, f"{lr:g}" + (" (the table's)" if lr == spec.table_lr
                                               else ""),
                         f"{d.mean():+.3g} ± {d.std():.2g}" if d.size else "not in the run",
                         ", ".join(f"{x:+.3g}" for x in d), j["signs"],
                         pairs.verdict_of(j["diffs"], c.want)])
    lines = "\n".join(f"- {v['claim']} (paper: {v['want']}): {v['text']}" for v in verdicts)
    md = (f"# Robustness to the shared client lr: {ctx.name}\n\n"
          f"Command: `{ctx.command}`\n\n"
          f"Every arm of this table shares one client lr ({spec.table_lr:g}); here the whole "
          f"experiment reruns with every run's client lr set to each of "
          f"{', '.join(f'{x:g}' for x in spec.lrs)}, everything else (seeds, schedule) as in "
          f"the table. {spec.note}Differences are the table's paired per-seed differences; "
          f"{pairs.RULE}. "
          "Source per lr: " + ", ".join(f"{lr:g}: {src}" for lr, (_, src) in got.items())
          + ".\n\n"
          + markdown_table(["claim", "client lr", "mean ± std", "per seed", "signs",
                            "verdict"], rows)
          + f"\n**Verdicts** (\"tuned\" = the table's lr {spec.table_lr:g}):\n\n{lines}\n"
          + (f"\nNot in these runs: {'; '.join(absent)}.\n" if absent else ""))
    print(md)
    ctx.write({"robustness.md": md,
               "robustness.json": {"command": ctx.command, "table_lr": spec.table_lr,
                                   "lrs": list(spec.lrs), "seeds": list(ctx.seeds),
                                   "sources": {str(lr): s for lr, (_, s) in got.items()},
                                   "verdicts": verdicts, "absent": absent}})
