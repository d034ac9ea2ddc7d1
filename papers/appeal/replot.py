"""Redraw the plots of a written appeal report from its `results.json`, without running
anything: `python -m papers.appeal.replot results/appeal-unseen [results/NAME ...]`.

Which plots a folder gets follows its table's report options (`papers.appeal.specs`):
`gm_appeal.png` and `preferred_acc.png` always, `clusters.png` where the runs hold
per-cluster diagnostics, `pool.png` for tables with opt-out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from papers.appeal.report import plot_clusters, plot_histories, plot_pool
from papers.appeal.specs import TABLES


def replot(folder: Path) -> list[str]:
    """Redraw the plots of `folder` (named like its table); returns the files written."""
    tables = {t.name: t for t in TABLES}
    name = folder.name.removesuffix("-quick")
    if name not in tables:
        raise SystemExit(f"replot: {folder} is not the folder of an appeal table "
                         f"({', '.join(sorted(tables))})")
    res = folder / "results.json"
    if not res.is_file():
        raise SystemExit(f"replot: {res} does not exist: run `fedjax-appeal reproduce {name}`")
    grid = json.loads(res.read_text())["grid"]
    opts = tables[name].report
    tag = opts.get("plot_tag", "seen")
    plot_histories(folder / "gm_appeal.png", grid, f"gm_appeal_{tag}",
                   f"GM-Appeal ({tag} clients)")
    plot_histories(folder / "preferred_acc.png", grid, f"preferred_acc_{tag}",
                   f"preferred-model test accuracy ({tag})")
    out = ["gm_appeal.png", "preferred_acc.png"]
    if (folder / "clusters.png").exists():
        plot_clusters(folder / "clusters.png", grid, tag)
        out.append("clusters.png")
    if opts.get("pool_plot"):
        plot_pool(folder / "pool.png", grid)
        out.append("pool.png")
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m papers.appeal.replot results/NAME [results/NAME ...]")
    for f in sys.argv[1:]:
        print(f, ", ".join(replot(Path(f))))
