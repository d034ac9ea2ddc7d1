"""`appeal-tune`: the hyperparameter search behind the MaxFL appeal tables.

For each FMNIST setting of the appeal tables (`papers.appeal.specs.SETTINGS`: Table 2 as in TMLR and
as in IncFL, Table 1's flexible participation; Table 4 uses Table 1's values) and each
algorithm of its tables, one `fedjax_appeal.run.sweep` runs the client lr grid (vmapped, one
program) x local steps tau (one compilation each), b = 64, on a held-out seed
(`TUNE_SEED`: its own data partition and training key, not one of the tables' seeds),
without unseen clients. As TMLR App. D.1 says, the chosen point has the highest final test
accuracy (seen clients), ties broken by GM-Appeal. The solo models use the client lr of
each grid point (`--solo-lr same`, D.1: "the same batch-size and learning rate").

The grid is the paper's lr grid without 0.001, and tau = 10 only (CPU budget; the paper
also searches b in {32, 64, 128} and tau in {10, 30, 50}). The chosen values are copied
into `papers.appeal.specs.TUNED` (constants, so the tables do not depend on a results
file); table.md prints them in that form.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

import fedjax_appeal  # load_federated through the package: tests replace it
from fedjax_appeal import HParams, program_cache_folder, sweep
from fedjax_appeal.extend import ALGORITHMS
from papers.appeal.specs import (
    BASE_HP,
    BASELINES,
    FMNIST_FULL,
    FMNIST_QUICK,
    LR_GRID,
    SETTINGS,
    TUNE_ALGORITHMS,
)
from papers.reproduce import Context, experiment, markdown_table, run_cache, run_key

TUNE_SEED = 100
GRID = {"client_lr": list(LR_GRID), "local_steps": [10]}
GRID_QUICK = {"client_lr": [0.05, 0.01], "local_steps": [10]}
KEYS = ("gm_appeal_seen", "test_acc_seen", "preferred_acc_seen")


def _grid_key(grid: dict[str, list]) -> str:
    return hashlib.sha256(json.dumps(grid, sort_keys=True).encode()).hexdigest()[:8]


def choose(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The point with the highest test accuracy (seen; TMLR D.1), ties by GM-Appeal (seen);
    NaN ranks last."""
    def key(p):
        g, a = p["gm_appeal_seen"], p["test_acc_seen"]
        ok = np.isfinite(g) and np.isfinite(a)
        return (ok, a if ok else -1.0, g if ok else -1.0)

    return max(points, key=key)


@experiment("appeal-tune", "grid search (lr x tau) of every appeal-table algorithm on the two "
            "FMNIST settings; chosen values for appeal.TUNED")
def appeal_tune(ctx: Context) -> None:
    grid = GRID_QUICK if ctx.quick else GRID
    base = FMNIST_QUICK if ctx.quick else FMNIST_FULL
    out: dict[str, Any] = {}
    for name, (_title, setting) in SETTINGS.items():
        if name not in TUNE_ALGORITHMS:
            continue
        cfg = ctx.base(**{"appeal": "on", **base, **setting, "seed": TUNE_SEED,
                          "eval_every": base["rounds"], "finetune_steps": 0,
                          "unseen_clients": 0})
        data, ds = fedjax_appeal.load_federated(cfg)
        out[name] = {}
        for v in BASELINES:
            if v.algorithm not in ALGORITHMS or v.algorithm not in TUNE_ALGORITHMS[name]:
                continue
            scfg, shp = cfg.replace(algorithm=v.algorithm, **v.cfg), HParams(**{**BASE_HP,
                                                                                 **v.hp})
            path = run_cache(ctx.cache_dir) / f"tune-{run_key(scfg, shp)}-{_grid_key(grid)}.json"
            if ctx.reuse and path.is_file():  # a sweep finished earlier with this code
                ctx.log(f"{name}: {v.label}: sweep finished earlier (cached in {path.parent})")
                points, timing_s = (lambda d: (d["points"], d["timing_s"]))(
                    json.loads(path.read_text()))
            else:
                ctx.log(f"{name}: sweeping {v.label} over {grid}")
                res = sweep(scfg, grid, [TUNE_SEED], hp=shp, metric="test_acc_seen",
                            data=data, dataset=ds, progress=ctx.log,
                            program_cache=program_cache_folder(), heartbeat=ctx.heartbeat)
                points = [{"client_lr": float(r["hparams"]["client_lr"]),
                           "local_steps": int(r["static"]["local_steps"]),
                           **{k: float(r["final"].get(k, float("nan"))) for k in KEYS}}
                          for r in res.rows]
                timing_s = res.timing["total_s"]
                ctx.spent.add_sweep(res.timing, len(res.rows))
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps({"points": points, "timing_s": timing_s}))
            best = choose(points)
            ctx.log(f"{name}: {v.label} -> lr {best['client_lr']:g}, tau "
                    f"{best['local_steps']}: GM-Appeal {best['gm_appeal_seen']:.3f}, test acc "
                    f"{best['test_acc_seen']:.4f}")
            out[name][v.algorithm] = {"label": v.label, "best": best, "points": points,
                                      "timing_s": timing_s}
    _report(ctx, out, grid)


def _report(ctx: Context, out: dict[str, Any], grid: dict[str, list]) -> None:
    parts = [f"# Hyperparameter search of the appeal tables\n\nCommand: `{ctx.command}`\n\n"
             f"Grid: {grid}, b = 64, seed {TUNE_SEED} (partition and training), "
             f"{'--quick setting' if ctx.quick else '200 rounds, 100 clients (no unseen)'}; "
             f"settings: {', '.join(TUNE_ALGORITHMS)}; "
             "solo lr = client lr of each point. Chosen: highest final test accuracy (seen), "
             "ties by GM-Appeal (seen) (TMLR App. D.1).\n"]
    for name, algs in out.items():
        title = SETTINGS[name][0]
        rows = [[a["label"], f"{a['best']['client_lr']:g}", a["best"]["local_steps"],
                 f"{a['best']['gm_appeal_seen']:.2f}", f"{100 * a['best']['test_acc_seen']:.2f}",
                 f"{100 * a['best']['preferred_acc_seen']:.2f}", f"{a['timing_s']:.0f}"]
                for a in algs.values()]
        parts.append(f"\n## {name}: {title}\n\n" + markdown_table(
            ["algorithm", "client lr", "tau", "GM-Appeal seen", "test acc seen (%)",
             "preferred acc seen (%)", "sweep s"], rows))
        lr_t = [(lr, t) for t in grid["local_steps"] for lr in grid["client_lr"]]
        rows = []
        for a in algs.values():
            by = {(p["client_lr"], p["local_steps"]): p for p in a["points"]}
            rows.append([a["label"]] + [
                f"{100 * by[(float(lr), int(t))]['test_acc_seen']:.2f} / "
                f"{by[(float(lr), int(t))]['gm_appeal_seen']:.2f}" for lr, t in lr_t])
        parts.append("\nTest accuracy seen (%) / GM-Appeal seen at every grid point:\n\n"
                     + markdown_table(["algorithm"] + [f"lr {lr:g}, tau {t}" for lr, t in lr_t],
                                      rows))
    consts = {name: {alg: (a["best"]["client_lr"], a["best"]["local_steps"])
                     for alg, a in algs.items()} for name, algs in out.items()}
    parts.append("\n## As `appeal.TUNED`\n\n```python\nTUNED = " + repr(consts) + "\n```\n")
    text = "".join(parts)
    print(text)

    def plot(path: Path) -> None:
        # lazy: matplotlib costs 330 ms of import (measured), paid only when a figure is drawn
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = list(out)
        n_alg = max(len(out[n]) for n in names)
        fig, axes = plt.subplots(len(names), n_alg, figsize=(2.6 * n_alg, 2.6 * len(names)),
                                 squeeze=False, sharey=True)
        for i, name in enumerate(names):
            for j, a in enumerate(out[name].values()):
                ax = axes[i][j]
                for t in grid["local_steps"]:
                    pts = sorted((p["client_lr"], p["test_acc_seen"]) for p in a["points"]
                                 if p["local_steps"] == t)
                    ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=f"tau {t}")
                ax.set_xscale("log")
                ax.set_title(f"{a['label']} ({name})", fontsize=8)
                ax.grid(alpha=0.3)
            axes[i][0].set_ylabel("test accuracy (seen)")
        axes[0][0].legend(fontsize=7)
        for ax in axes[-1]:
            ax.set_xlabel("client lr")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)

    ctx.write({"table.md": text, "results.json": {"command": ctx.command, "grid": grid,
                                                  "seed": TUNE_SEED, "settings": out},
               "tuning.png": plot})
