"""The MaxFL and IncFL appeal tables as `reproduce` experiments: each `Table` of
`papers.appeal.specs` is run by `papers.runner.run_table` and written by
`papers.appeal.report`. Every run goes through `run_config`, so it gets the appeal protocol
whatever the algorithm.
"""

from __future__ import annotations

from typing import Any

from papers.appeal.report import (
    METRICS,
    appeal_by_def,
    cluster_diagnostics,
    paired_metric_list,
    paper_effect,
    report_table,
)
from papers.appeal.specs import TABLES
from papers.decide import MainClaim, per_seed
from papers.reproduce import Context, experiment
from papers.robustness import run_robustness
from papers.runner import run_table
from papers.spec import Table

HISTORY_KEYS = ("round", "test_acc_seen", "test_acc_unseen", "gm_appeal_seen",
                "gm_appeal_unseen", "preferred_acc_seen", "preferred_acc_unseen",
                "train_loss_seen_mean", "test_loss_seen_mean")


def record(res: dict, data) -> dict[str, Any]:
    """What a table keeps of one run: final numbers, history, timing, pool sizes, and the
    per-cluster and per-appeal-definition diagnostics."""
    run = {"final": res["history"][-1],
           "history": [{k: h.get(k) for k in HISTORY_KEYS} for h in res["history"]],
           "timing": res["timing"],
           "available": res["round_metrics"].get("available"),
           "appealed": res["round_metrics"].get("appealed")}
    if "cluster" in data.info:
        run["clusters"] = cluster_diagnostics(res, data)
    run["by_def"] = appeal_by_def(res["final_clients"])
    return run


def main_claim(table: Table) -> MainClaim:
    """The claim `--seeds auto` decides: the report's target minus the best other arm on
    `table.claim` (setting label, metric), by default the first setting and the first
    paired metric; the paper's effect comes with each paired row (`report.paired`), or,
    where the paper gives no arm numbers but states the gap in its text, from the table's
    `report["paper_text_effect"]`."""
    target = table.report.get("target", "MaxFL")
    text_effect = table.report.get("paper_text_effect")
    column, metric = table.claim or (table.settings[0].label, paired_metric_list(
        list(table.metrics), table.report.get("paired_metrics"))[0])

    def row(data: dict) -> dict | None:
        return next((r for r in data.get("paired", [])
                     if r["column"] == column and r["metric"] == metric), None)

    def values(data: dict, seeds: list[int]) -> dict[int, float] | None:
        r = row(data)
        return None if r is None else per_seed(r["diff"], r["seeds"])

    def paper(data: dict) -> float | None:
        r = row(data)
        if r is not None and r.get("paper_effect") is None and text_effect is not None:
            return text_effect  # the paper states the gap in its text, without arm numbers
        if r is None or "paper_effect" in r:
            return None if r is None else r["paper_effect"]
        # a report whose paired rows predate "paper_effect": from the paper's numbers and
        # the arms it ran, as `report.paired` computes it
        numbers = {tuple(k.split("|", 1)): v for k, v in (data.get("paper") or {}).items()}
        arms = [a for a, rec in ((data.get("grid") or {}).get(column) or {}).items()
                if isinstance(rec, dict) and rec.get("status", "ok") == "ok"]
        return paper_effect(numbers, column, metric, target, arms)[0]

    def shared_lrs(rob: dict) -> dict[float, list[float]] | None:
        for v in rob.get("verdicts") or []:
            if v.get("column") == column and v.get("metric") == metric:
                return {float(p["client_lr"]): p["diff"] for p in v["per_lr"]}
        return None

    return MainClaim(f"{column}: {METRICS[metric][0]}, {target} − the best other arm", "+",
                     values, paper_of=paper, digits=3, shared_lrs=shared_lrs)


def run_and_report(ctx: Context, table: Table) -> None:
    """The table (`report_table`), or with `--robustness` its shared-lr check
    (`papers.robustness.run_robustness`)."""
    if ctx.robustness:
        run_robustness(ctx, table)
        return
    report_table(ctx, table, run_table(ctx, table, record))


for _table in TABLES:
    experiment(_table.name, _table.help, robustness=bool(_table.robustness),
               claim=main_claim(_table))(lambda ctx, t=_table: run_and_report(ctx, t))
