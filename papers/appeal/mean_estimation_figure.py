"""`mean-estimation` (MaxFL Figure 2): GM-Appeal of FedAvg / MaxFL / MaxFL-ReLU vs
heterogeneity in the mean-estimation toy problem (`papers.extensions.mean_estimation`).
Writes `table.md`, `mean_estimation.csv`, `gm_appeal.png` and `results.json`."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import jax
import numpy as np

from papers.extensions import mean_estimation as me
from papers.reproduce import Context, experiment, markdown_table


@experiment("mean-estimation", "MaxFL Figure 2: GM-Appeal of FedAvg / MaxFL / MaxFL-ReLU vs "
            "heterogeneity in mean estimation")
def mean_estimation(ctx: Context) -> None:
    draws = 1000 if ctx.quick else 10_000
    het = np.linspace(0.0, 8.0, 9 if ctx.quick else 17)
    ctx.log(f"{draws} draws x {len(het)} heterogeneity levels x {len(me.SHAPES)} cases")
    per_seed = [me.run(jax.random.key(s), het, draws) for s in ctx.seeds]
    rows = []
    for i, r in enumerate(per_seed[0]):
        vals = [ps[i]["gm_appeal"] for ps in per_seed]
        rows.append({**{k: r[k] for k in ("case", "gamma_G2", "method")},
                     "gm_appeal_mean": float(np.mean(vals)), "gm_appeal_std": float(np.std(vals)),
                     "se_within_seed": r["se"]})
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)

    def plot(path: Path) -> None:
        # lazy: matplotlib costs 330 ms of import (measured), paid only when a figure is drawn
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(me.SHAPES), figsize=(4 * len(me.SHAPES), 3.6),
                                 sharey=True)
        for ax, case in zip(axes, me.SHAPES, strict=True):
            for m, lab in (("fedavg", "FedAvg"), ("maxfl", "MaxFL (sigmoid)"),
                           ("maxfl_relu", "MaxFL-ReLU")):
                pts = [(r["gamma_G2"], r["gm_appeal_mean"]) for r in rows
                       if r["case"] == case and r["method"] == m]
                ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=lab)
            ax.set_title(case)
            ax.set_xlabel("heterogeneity gamma_G^2 / gamma^2")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("GM-Appeal")
        axes[0].legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)

    show = [h for h in het if h in (0.0, 1.0, 2.0, 4.0, 8.0)]
    header = ["case", "method"] + [f"gamma_G2={h:g}" for h in show]
    trows = []
    for case in me.SHAPES:
        for m in me.METHODS:
            trows.append([case, m] + [
                next(f"{r['gm_appeal_mean']:.3f} ± {r['gm_appeal_std']:.3f}" for r in rows
                     if r["case"] == case and r["method"] == m and r["gamma_G2"] == h)
                for h in show])
    text = (f"# Mean estimation: GM-Appeal vs heterogeneity (MaxFL Figure 2)\n\nCommand: "
            f"`{ctx.command}`\n\nSeeds {ctx.seeds}, {draws} draws per point and seed "
            "(mean ± std over seeds). Setup (`papers/extensions/mean_estimation.py`): "
            "gamma^2 = 1, theta_k = sqrt(gamma_G^2) u_k, theta_hat_k ~ N(theta_k, 1), "
            "f_k(w) = (w - "
            "theta_hat_k)^2, rho_k = 2; appeal iff |w - theta_k| < |theta_hat_k - theta_k|.\n\n"
            + markdown_table(header, trows) +
            "\n## Notes\n\n- The paper gives this as a figure (no numbers): FedAvg's appeal "
            "falls to 0 as heterogeneity grows, MaxFL keeps a global model that appeals to a "
            "subset of clients. Here, with 2 far-apart clients MaxFL sits next to one "
            "client's empirical mean (shifted towards the other by an exponentially small "
            "amount), which beats that client's solo model half of the time: GM-Appeal -> "
            "1/4; FedAvg -> 0. MaxFL-ReLU has zero gradient once a client's requirement is "
            "met and otherwise the FedAvg gradient, so from the mean start it stays at "
            "FedAvg's solution.\n")
    print(text)
    ctx.write({"table.md": text, "mean_estimation.csv": buf.getvalue(),
               "gm_appeal.png": plot,
               "results.json": {"command": ctx.command, "seeds": ctx.seeds, "draws": draws,
                                "rows": rows}})

