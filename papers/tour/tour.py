"""`fedjax-appeal reproduce tour`: the first thing to run. Three claims of the papers this
simulator reproduces, each as ONE paired comparison on the same seeds (0..9 by default)
with one shared client learning rate (`papers.tour.specs`): Exp-α vs proportional weights
(Exp-α paper, Table 2), MaxFL vs FedAvg under flexible participation (Cho et al.,
"Maximizing Global Model Appeal in Federated Learning", Table 1) and DivFL vs Random
selection (SubTrunc / UnionFL paper, Table I).

Each comparison is one `sweep` (its arm key x the seeds, and for MaxFL the grid of shared
lrs: each arm one compiled program vmapped over its runs), its grid sharded over every
device (the host CPU split into one device per core when JAX is not running yet). Each
claim's verdict comes from the 95% intervals of the paired differences
(`fedjax_appeal.paired_report`: held / reversed / inconclusive). The screen gets at most 40
lines: per comparison the per-seed values and differences, the verdict with its intervals;
the throughput, where the wall time went, the layout; the scorecard's counts. `table.md`
holds the settings of every arm and the lr grid, `results.json` every per-seed number and
history, `tour.png` each claim's metric over rounds with its 95% interval and the paired
difference.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from fedjax_appeal import (
    ConfigError,
    HParams,
    command_split,
    make_mesh,
    metric_range,
    program_cache_folder,
    runtime_record,
    split_cpu,
    split_text,
    sweep,
    t_quantile,
    time_split,
)
from papers.reproduce import Context, experiment, markdown_table
from papers.tour.logic import (
    count_scorecard,
    count_sizes,
    family_lines,
    fmt,
    held_at,
    paired_verdict,
    scorecard_line,
    throughput,
    verdict_line,
)
from papers.tour.specs import FAMILIES, TINY, Family

SCORECARD = Path(__file__).resolve().parents[2] / "results" / "README.md"
OPTIONS = {"tiny": "1 shrinks every schedule to a pipeline check (the numbers mean nothing)"}


def execution_layout() -> tuple[Any, dict[str, Any]]:
    """(mesh or None, layout record): the host CPU split into one JAX device per usable
    core when JAX does not run yet in this process (`split_cpu`), then a mesh over every
    device, over which each sweep shards its runs (one run at a time per CPU device)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    split = 0
    if cores > 1:
        try:
            split_cpu(cores)
            split = cores
        except ConfigError:  # JAX already runs here (a caller's process): left as it is
            split = 0
    mesh = make_mesh(0)
    n = int(jax.device_count())
    backend = jax.default_backend()
    why = ("host CPU split, one per core" if split and
           backend == "cpu" else "JAX already running: its devices as they were"
           if backend == "cpu" else f"every {backend} device")
    return mesh, {"mode": "auto", "kind": "sweep grid sharded over the devices",
                  "devices": n, "backend": backend, "cpu_split": split, "why": why}


def _grid(fam: Family) -> dict[str, list]:
    g: dict[str, list] = {fam.arm_key: [v for _, v in fam.arms]}
    if fam.lr_grid:
        g["client_lr"] = list(fam.lr_grid)
    return g


def run_family(ctx: Context, fam: Family, seeds: list[int], mesh, tiny: bool
               ) -> dict[str, Any]:
    """One family's sweep and what the tour keeps of it: per arm and seed the final
    metrics and the curve at the shown (shared) lr, the paired verdict, the lr grid's
    verdicts, the arms' settings and the sweep's timing."""
    cfg = ctx.base(**{**fam.cfg, **(TINY[fam.key] if tiny else {}), "seed": seeds[0]})
    lr = fam.hp["client_lr"]
    res = sweep(cfg, _grid(fam), seeds, hp=HParams(**fam.hp), metric=fam.metric,
                mode="min" if fam.want == "-" else "max", mesh=mesh,
                program_cache=program_cache_folder(), heartbeat=ctx.heartbeat)
    ctx.spent.add_sweep(res.timing, len(res.rows))
    label = {v: lab for lab, v in fam.arms}
    runs: dict[float, dict[str, dict[int, dict]]] = {}
    for row in res.rows:
        arm = label[row["static"][fam.arm_key]]
        r_lr = float(row["hparams"].get("client_lr", lr))
        keep = [fam.metric] + ([fam.second] if fam.second else [])
        runs.setdefault(r_lr, {}).setdefault(arm, {})[int(row["seed"])] = {
            "final": {k: row["final"].get(k) for k in ["round", *dict.fromkeys(keep)]},
            "history": [{k: h.get(k) for k in ["round", *dict.fromkeys(keep)]}
                        for h in row["history"]],
            "diverged_round": row["diverged_round"]}
    (a, _), (b, _) = fam.arms

    def values(r_lr: float, key: str) -> dict[str, dict[int, float]]:
        nan = float("nan")
        return {arm: {s: (nan if runs[r_lr][arm][s]["final"][key] is None
                          else float(runs[r_lr][arm][s]["final"][key])) for s in seeds}
                for arm in (a, b)}

    shown = values(lr, fam.metric)
    grid = {}
    for r_lr in sorted(runs):
        v = values(r_lr, fam.metric)
        grid[r_lr] = {**paired_verdict(v[a], v[b], fam.want), "values": v}
    groups = [{**g, "rounds": cfg.rounds, "cohort": cfg.cohort, "local_steps": cfg.local_steps}
              for g in res.timing["groups"]]
    settings = {arm: {**{k: getattr(cfg.replace(**{fam.arm_key: v}), k)
                         for k in [*fam.cfg, "seed"]}, **fam.hp}
                for arm, v in ((lab, v) for lab, v in fam.arms)}
    setting = (fam.setting.format(**cfg.as_dict())
               + f", {cfg.rounds} rounds x {cfg.local_steps} local steps"
               + (" (tiny: a pipeline check)" if tiny else ""))
    return {"family": fam.key, "title": fam.title, "paper": fam.paper, "claim": fam.claim,
            "setting": setting,
            "metric": fam.metric, "want": fam.want, "client_lr": lr, "seeds": seeds,
            "values": shown, "paired": paired_verdict(shown[a], shown[b], fam.want),
            "second": values(lr, fam.second) if fam.second else None,
            "lr_grid": grid if fam.lr_grid else None,
            "held_at": list(held_at(grid)) if fam.lr_grid else None,
            "settings": settings, "runs": {str(k): v for k, v in runs.items()},
            "timing": {"groups": groups, "total_s": res.timing["total_s"],
                       "data_s": res.timing["data_s"]}}


def mean_band(ys: np.ndarray, lo: float = -np.inf, hi: float = np.inf
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lower, upper) over axis 0 of [seeds, points]: the 95% t interval of the mean
    at each point, clipped to [lo, hi]."""
    n = ys.shape[0]
    m = np.nanmean(ys, 0)
    if n < 2:
        return m, m, m
    half = t_quantile(n - 1) * np.nanstd(ys, 0, ddof=1) / np.sqrt(n)
    return m, np.clip(m - half, lo, hi), np.clip(m + half, lo, hi)


def plot_tour(path: Path, fams: list[Family], out: dict[str, dict]) -> None:
    """Two rows of panels, one column per family, both at the shared lr. Top: the claim's
    own metric over rounds, per arm its mean over seeds with the 95% t interval of the mean
    (clipped to the metric's range). Bottom: the paired difference first − second over
    rounds with its 95% t interval, the zero line and the final verdict; the paper's side
    of zero is shaded."""
    # lazy: matplotlib costs 330 ms of import (measured), paid only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = (("tab:blue", "-", "o"), ("tab:orange", "--", "s"))
    fig, axes = plt.subplots(2, len(fams), figsize=(5.2 * len(fams), 7.6), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    for j, fam in enumerate(fams):
        ax, dx = axes[0][j], axes[1][j]
        rec = out[fam.key]
        lr_runs = rec["runs"][str(float(rec["client_lr"]))]
        lo, hi = metric_range(fam.metric)
        series = {}
        for (lab, _), (color, ls, mk) in zip(fam.arms, styles, strict=True):
            hs = [lr_runs[lab][s]["history"] for s in rec["seeds"]]
            n = min(len(h) for h in hs)
            xs = [hs[0][i]["round"] for i in range(n)]
            ys = np.array([[np.nan if h[i][fam.metric] is None else h[i][fam.metric]
                            for i in range(n)] for h in hs], np.float64)
            series[lab] = (xs, ys)
            m, b0, b1 = mean_band(ys, lo, hi)
            ax.fill_between(xs, b0 * fam.scale, b1 * fam.scale, color=color, alpha=0.18, lw=0)
            ax.plot(xs, m * fam.scale, color=color, ls=ls, marker=mk, ms=4, lw=1.6,
                    label=f"{lab} (mean of {len(hs)} seeds; band: 95% interval)")
        ax.set_title(f"{fam.title}\n{fam.paper}", fontsize=8.5)
        ax.set_ylabel(fam.short, fontsize=8.5)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7.5, loc="best", frameon=False)
        (a, _), (b, _) = fam.arms
        xs = series[a][0][:min(len(series[a][0]), len(series[b][0]))]
        d = (series[a][1][:, :len(xs)] - series[b][1][:, :len(xs)]) * fam.scale
        m, b0, b1 = mean_band(d)
        dx.fill_between(xs, b0, b1, color="tab:green", alpha=0.2, lw=0)
        dx.plot(xs, m, color="tab:green", marker="o", ms=3, lw=1.4,
                label=f"{a} − {b} (95% interval)")
        dx.axhline(0, color="black", lw=0.8)
        top, bottom = dx.get_ylim()[1], dx.get_ylim()[0]
        side = (0, top) if fam.want == "+" else (bottom, 0)
        dx.axhspan(*side, color="tab:green", alpha=0.05, lw=0)
        dx.set_ylim(bottom, top)
        dx.set_xlabel("round")
        dx.set_ylabel(f"difference ({fam.short})", fontsize=8.5)
        dx.set_title(f"final: {rec['paired']['verdict']} (shaded: the paper's side)",
                     fontsize=8.5)
        dx.grid(alpha=0.3)
        dx.legend(fontsize=7.5, loc="best", frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def table_markdown(ctx: Context, fams: list[Family], out: dict[str, dict], footer: list[str],
                   tiny: bool) -> str:
    """table.md: per family the claim, the per-seed table, the verdict, the lr grid (MaxFL)
    and the settings of each arm; then throughput, layout and the scorecard rule."""
    parts = [f"# Tour: one paired comparison per paper family{' (tiny schedule)' if tiny else ''}",
             "", f"Command: `{ctx.command}`", "",
             "Each comparison runs both arms on the same seeds with one shared client lr; a "
             "seed fixes the model initialisation, the cohorts and the minibatches (the data "
             "partition is the one of the first seed for all runs of a sweep). Verdict "
             "(`fedjax_appeal.paired_report`): **held** when the 95% paired t interval of "
             "the mean difference lies on the paper's side of 0, **reversed** when it lies "
             "on the other side, **inconclusive** when it contains 0; the 95% sign-flip "
             "permutation interval is shown beside it (it decides only when every seed has "
             "the same difference).", ""]
    for i, fam in enumerate(fams):
        rec = out[fam.key]
        (a, _), (b, _) = fam.arms
        seeds = rec["seeds"]
        p = rec["paired"]
        diffs = dict(zip(p["seeds"], p["diffs"], strict=True))
        rows = [[lab] + [fmt(rec["values"][lab][s], fam.scale, fam.digits + 1) for s in seeds]
                for lab in (a, b)]
        rows.append([f"{a} − {b}"] + [("+" if diffs[s] > 0 else "")
                                      + fmt(diffs[s], fam.scale, fam.digits + 1) for s in seeds])
        parts += [f"## {i + 1}. {fam.title} — {fam.paper}", "",
                  f"Claim: {fam.claim} (sign of {a} − {b}: {fam.want}). Setting: "
                  f"{rec['setting']}. Shared client lr {rec['client_lr']:g}. Metric: "
                  f"{fam.metric_label} (`{fam.metric}`, final evaluation).", "",
                  markdown_table(["arm"] + [f"seed {s}" for s in seeds], rows),
                  f"Verdict: **{verdict_line(p, fam.scale, fam.digits + 1)}**.", ""]
        if rec["second"]:
            sv = paired_verdict(rec["second"][a], rec["second"][b], "+")
            parts += [f"{fam.second_label} (`{fam.second}`), {a} − {b} per seed: "
                      + ", ".join(f"{d * fam.second_scale:+.2f}" for d in sv["diffs"])
                      + f" ({verdict_line(sv, fam.second_scale, 2)}; not part of the "
                      "verdict).", ""]
        if rec["lr_grid"]:
            k, n = rec["held_at"]
            grows = [[f"{lr:g}"] + [", ".join(fmt(v["values"][lab][s], fam.scale, fam.digits)
                                              for s in seeds) for lab in (a, b)]
                     + [v["signs"], verdict_line(v, fam.scale, fam.digits + 1)]
                     for lr, v in rec["lr_grid"].items()]
            parts += [f"Shared client lr grid (both arms at the same lr; solo models at that "
                      f"lr too): held at {k} of {n} lrs.", "",
                      markdown_table(["client lr", f"{a} per seed", f"{b} per seed",
                                      "signs", "verdict"], grows), fam.schedule_note, ""]
        elif fam.schedule_note:
            parts += [fam.schedule_note, ""]
        parts += ["Settings of each arm (RunConfig and HParams keys):", ""]
        parts += [f"- {arm}: " + ", ".join(f"{k}={v}" for k, v in s.items())
                  for arm, s in rec["settings"].items()]
        parts.append("")
    parts += ["## Throughput, layout, scorecard", ""] + [f"- {line}" for line in footer]
    parts += ["", "Scorecard rule: in every table of `results/README.md` whose header has a "
              "column named \"held...\", a row's verdict is the leftmost of the phrases \"held "
              "at tuned lrs only\", \"inconclusive\", \"reversed\", \"not held\" and \"held\" "
              "in that cell (bold and case ignored); rows naming none (e.g. \"—\") are not "
              "counted.", ""]
    return "\n".join(parts)


def time_split_of(ctx: Context, out: dict[str, dict], tp: dict[str, Any], wall: float
                  ) -> tuple[str, dict[str, Any]]:
    """(line, split): where the tour's wall time went, compile / train / eval / data /
    other, from the command's clock (since the process started, every program it
    compiled) when it has one, else from the sweeps' own timings (since the tour
    started)."""
    data_s = sum(rec["timing"]["data_s"] for rec in out.values())
    train_s = tp["train_s"] + tp["init_s"]  # chunks of rounds and the init programs
    if ctx.clock is not None:
        s = command_split(ctx.clock, train_s, tp["eval_s"], data_s)
        return split_text(s, s["programs"]), s
    s = time_split(wall, compile_s=tp["compile_s"], train_s=train_s, eval_s=tp["eval_s"],
                   data_s=data_s)
    return split_text(s), s


@experiment("tour", "a short tour: Exp-α, MaxFL and DivFL each against its baseline on the "
            "same 10 seeds with one shared lr, each verdict from 95% intervals",
            options=OPTIONS, seeds=range(10))
def tour(ctx: Context) -> None:
    t0 = time.perf_counter()
    mesh, layout = execution_layout()
    tiny = ctx.quick or ctx.flag("tiny")
    seeds = list(ctx.seeds)
    if len(seeds) < 2:
        raise ConfigError("reproduce tour compares arms seed by seed: give at least two "
                          "seeds (default: --seeds 0,1,2,3,4,5,6,7,8,9)")
    fams = list(FAMILIES)
    out: dict[str, dict] = {}
    for i, fam in enumerate(fams):
        ctx.log(f"{i + 1}/{len(fams)} {fam.title}: {2 * len(seeds) * max(1, len(fam.lr_grid))}"
                " runs ...")
        out[fam.key] = run_family(ctx, fam, seeds, mesh, tiny)
    groups = [g for rec in out.values() for g in rec["timing"]["groups"]]
    tp = throughput(groups)
    wall = time.perf_counter() - t0
    lanes = sorted({g["lanes"] for g in groups})
    layout["lanes"] = lanes[0] if len(lanes) == 1 else lanes
    card = SCORECARD.read_text() if SCORECARD.is_file() else None
    counts = count_scorecard(card) if card is not None else None
    sizes = count_sizes(card) if card is not None else None
    time_text, time_rec = time_split_of(ctx, out, tp, wall)
    footer = [
        f"throughput: {tp['client_steps_per_s']:,.0f} client-steps/s, "
        f"{tp['rounds_per_s']:.1f} rounds/s while training ({tp['runs']} runs)",
        time_text,
        f"layout: runs sharded over {layout['devices']} {layout['backend']} device(s) "
        f"({layout['why']}), {layout['lanes']} at a time each",
        scorecard_line(counts, "results/README.md", sizes)]
    screen = ["Tour: three claims of the papers, each a paired comparison: same seeds, same "
              "client lr,", "only the method differs; difference = first − second arm, seed "
              "by seed."]
    for i, fam in enumerate(fams):
        rec = out[fam.key]
        screen += family_lines(i + 1, len(fams), fam, rec["setting"], rec["values"],
                               rec["paired"], seeds, rec["client_lr"], rec["second"],
                               tuple(rec["held_at"]) if rec["held_at"] else None)
    screen += [*footer,
               f"figure: {ctx.out / 'tour.png'}; settings and every number: "
               f"{ctx.out / 'table.md'}, results.json"]
    data = {"command": ctx.command, "seeds": seeds, "tiny": tiny, "families": out,
            "throughput": tp, "layout": layout, "wall_s": wall, "time": time_rec,
            "runtime": runtime_record(), "scorecard": counts}
    ctx.write({"table.md": table_markdown(ctx, fams, out, footer, tiny), "results.json": data,
               "tour.png": lambda p: plot_tour(p, fams, out)})
    print("\n".join(screen), flush=True)
