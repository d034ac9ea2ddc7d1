"""`fedjax-appeal reproduce all`: every paper table that names a main claim, one after
another, with an ETA, and the scorecard of their main claims.

The tables are the experiments registered with a main claim (`reproduce list` marks them
[auto]), in registration order (MaxFL / IncFL, client selection, Exp-α, FedNova /
FedBuff). Each is run as `reproduce NAME` would run it with the same `--seeds` (a list,
or auto[:MAX]: seeds until its main claim is decided), into `OUT/NAME` (OUT: `--out`,
default `runs/reproduce`). Every run goes through the run cache, so an interrupted `all`
started again continues where it stopped; a table that fails is reported and the others
still run.

ETA: each table's cost is estimated from its committed report in `results/NAME/` (the
`cost` entry of its results.json: wall seconds per seed, counting only computed runs; a
report without one: the per-run timings it holds, training and evaluation only, an
underestimate), scaled to the seeds asked (with auto: the maximum, an upper bound).
Before each table the command prints the table's estimate and the remaining total; the
estimate is replaced by the measured time as tables finish.

`OUT/scorecard.md` and `scorecard.json`: one row per table, its main claim, the seeds,
our mean difference with its 95% interval (the repeated interval with `--seeds auto`,
else the paired t interval), the direction verdict (held / reversed / inconclusive, in a
column whose header starts with "held", as `papers.tour.logic.count_scorecard` counts),
the size verdict against the paper's effect where the paper gives one (a "size" column,
`count_sizes`), and the table's cost; the counts of both verdicts head the file.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from fedjax_appeal import (
    ConfigError,
    deciding_interval,
    no_spread,
    paired_report,
    size_text,
    size_verdict,
    write_outputs,
)
from papers import reproduce  # its tables through it: tests replace them
from papers.decide import paper_effect
from papers.tour.logic import TUNED_ONLY, count_scorecard, count_sizes, scorecard_line

RESULTS = Path(__file__).resolve().parent.parent / "results"


def _timed_runs(node: Any, parent: Any = None) -> float:
    """Seconds of every run record below `node` that states its time per round: rounds ×
    sec_per_round + its evaluation, compile and set-up seconds (where recorded)."""
    total = 0.0
    if isinstance(node, dict):
        spr = node.get("sec_per_round")
        if isinstance(spr, int | float) and math.isfinite(spr):
            host = parent if isinstance(parent, dict) else {}
            hist = node.get("history") or host.get("history") or []
            final = node.get("final") or host.get("final") or (hist[-1] if hist else {})
            rounds = final.get("round") if isinstance(final, dict) else None
            if isinstance(rounds, int | float):
                extra = sum(float(node.get(k) or 0.0) for k in (
                    "eval_total_s", "compile_s", "eval_compile_s", "init_s", "load_s"))
                total += float(spr) * float(rounds) + extra
        for v in node.values():
            total += _timed_runs(v, node)
    elif isinstance(node, list):
        for v in node:
            total += _timed_runs(v, parent)
    return total


def seeds_in(node: Any, found: set[int] | None = None) -> set[int]:
    """Every integer "seed" of the records below `node` (the seeds a report ran)."""
    found = set() if found is None else found
    if isinstance(node, dict):
        if isinstance(node.get("seed"), int):
            found.add(node["seed"])
        for v in node.values():
            seeds_in(v, found)
    elif isinstance(node, list):
        for v in node:
            seeds_in(v, found)
    return found


def estimate(name: str, seeds: int, default_seeds: int, root: Path = RESULTS
             ) -> tuple[float | None, str]:
    """(seconds, where from) for table `name` on `seeds` seeds, from its committed report
    in `root/name/results.json` (None: no report or no timing in it)."""
    path = root / name / "results.json"
    if not path.is_file():
        return None, "no committed report"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, "unreadable committed report"
    had = len(data.get("seeds") or []) or len(seeds_in(data)) or default_seeds
    cost = data.get("cost") or {}
    wall = (cost.get("time") or {}).get("wall")
    runs = cost.get("runs") or {}
    if isinstance(wall, int | float) and runs.get("computed"):
        per_run = wall / runs["computed"]  # cached runs cost nothing: scale to all runs
        total_runs = runs["computed"] + runs.get("cached", 0)
        return (per_run * total_runs * seeds / had,
                f"its report's cost: {wall:.0f} s for {runs['computed']} computed runs on "
                f"{had} seeds")
    timed = _timed_runs(data)
    if timed > 0:
        return (timed * seeds / had,
                f"per-run timings of its report ({had} seeds; training and evaluation "
                "only)")
    return None, "its report records no time"


def duration(s: float | None) -> str:
    """'3 h 05 min', '12 min', '40 s'; None: 'unknown'."""
    if s is None:
        return "unknown"
    if s < 60:
        return f"{s:.0f} s"
    m = round(s / 60)
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{m} min"


def cost_text(row: dict[str, Any]) -> str:
    """The scorecard's cost cell: the report's wall time, and how many of its runs came
    from the run cache when some did (their cost was paid by an earlier command)."""
    text = duration(row.get("wall_s"))
    runs = row.get("runs") or {}
    cached = runs.get("cached", 0)
    if cached and row.get("wall_s") is not None:
        text += f" ({cached} of {cached + runs.get('computed', 0)} runs from the run cache)"
    return text


def main_row(ctx: Any, data: dict) -> dict[str, Any]:
    """The scorecard row of one finished table: its main claim's verdicts from the
    results it wrote (`seeds_until_decided` with `--seeds auto`, else the fixed-n paired
    report of the claim's per-seed differences)."""
    claim = ctx.claim
    seq = data.get("seeds_until_decided")
    paper = paper_effect(ctx, data)
    if seq is not None:
        last = seq["looks"][-1] if seq["looks"] else {"mean": math.nan,
                                                      "interval": [math.nan, math.nan]}
        return {"table": ctx.name, "claim": claim.label, "want": claim.want,
                "seeds": seq["seeds_used"], "mean": last["mean"],
                "interval": last["interval"], "interval_kind": "95% repeated",
                "verdict": seq["verdict"], "paper_effect": paper, "size": seq["size"]}
    vals = claim.values(data, list(ctx.seeds)) or {}
    rep = paired_report(vals, dict.fromkeys(vals, 0.0), claim.want)
    verdict = rep.verdict if not rep.missing else "inconclusive"
    iv = deciding_interval(rep)
    kind = "95% sign-flip" if no_spread(np.asarray(rep.diffs, np.float64)) else "95% t"
    return {"table": ctx.name, "claim": claim.label, "want": claim.want, "seeds": rep.n,
            "mean": rep.mean, "interval": list(iv), "interval_kind": kind,
            "verdict": verdict, "paper_effect": paper,
            "size": size_verdict(iv, paper, claim.want)}


def robust_text(claim: Any, path: Path) -> str | None:
    """'held at k of n shared lrs (m seeds)': the claim at each shared client lr of the
    table's robustness rerun (`path`), by the same 95% interval rule; None when there is
    no rerun or it does not hold this claim."""
    if claim.shared_lrs is None or not path.is_file():
        return None
    per_lr = claim.shared_lrs(json.loads(path.read_text()))
    if not per_lr:
        return None
    held = 0
    for diffs in per_lr.values():
        vals = {i: math.nan if d is None else float(d) for i, d in enumerate(diffs)}
        rep = paired_report(vals, dict.fromkeys(vals, 0.0), claim.want)
        held += rep.verdict == "held" and not rep.missing
    seeds = sorted({len(d) for d in per_lr.values()})
    return (f"held at {held} of {len(per_lr)} shared lrs "
            f"({'/'.join(map(str, seeds))} seeds)")


def committed_rows(root: Path = RESULTS) -> list[dict[str, Any]]:
    """The scorecard rows of the committed reports, without running anything: for each
    table with a main claim, the report in `root/NAME` or `root/NAME-10` (a rerun on more
    seeds) that holds the claim on the most seeds; its cost from the report."""
    rows = []
    for name, claim in reproduce.CLAIMS.items():
        best: tuple[int, dict[str, Any]] | None = None
        for folder in sorted(root.glob(f"{name}*")):
            if folder.name not in (name, f"{name}-10") or not (folder / "results.json"
                                                               ).is_file():
                continue
            data = json.loads((folder / "results.json").read_text())
            seeds = data.get("seeds") or sorted(seeds_in(data))
            ctx = argparse.Namespace(name=name, claim=claim, seeds=seeds)
            if claim.values(data, list(seeds)) is None:
                continue
            row = main_row(ctx, data)
            row["folder"] = folder.name
            # the rerun's own robustness check (same seeds) where it has one
            own = folder / "robustness.json"
            row["robust"] = robust_text(claim, own if own.is_file()
                                        else root / name / "robustness.json")
            if row["verdict"] == "held" and (row["robust"] or "").startswith("held at 0 of"):
                row["verdict"] = TUNED_ONLY  # held at the arms' own lrs, at no shared one
            wall = ((data.get("cost") or {}).get("time") or {}).get("wall")
            row["wall_s"] = wall if isinstance(wall, int | float) else None
            row["runs"] = (data.get("cost") or {}).get("runs")
            if best is None or row["seeds"] > best[0]:
                best = (row["seeds"], row)
        rows.append(best[1] if best else {"table": name, "claim": claim.label,
                                          "failed": "no committed report"})
    return rows


def scorecard_markdown(rows: list[dict[str, Any]], title: str) -> str:
    """scorecard.md: the counts of both verdicts, then one row per table."""
    lines = ["| table | main claim (paper's direction) | seeds | ours: mean [interval] | "
             "held? | size | cost | robust at one shared client lr? |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r.get("failed"):
            lines.append(f"| {r['table']} | {r.get('claim', '')} | — | — | not run "
                         f"({r['failed']}) | — | — | — |")
            continue
        lo, hi = r["interval"]
        iv = (f"{r['mean']:+.3g} [{lo:+.3g}, {hi:+.3g}] ({r['interval_kind']})"
              if all(isinstance(v, float | int) and math.isfinite(v) for v in (lo, hi))
              else f"{r['mean']:+.3g} [n/a]")
        size = ("no paper number" if r["paper_effect"] is None
                else size_text(r["size"], r["paper_effect"], 1.0, 3))
        table = r["table"] if r.get("folder", r["table"]) == r["table"] else r["folder"]
        lines.append(f"| {table} | {r['claim']} ({r['want']}) | {r['seeds']} | {iv} | "
                     f"{r['verdict']} | {size} | {cost_text(r)} | "
                     f"{r.get('robust') or '—'} |")
    body = "\n".join(lines) + "\n"
    head = scorecard_line(count_scorecard(body), "this table", count_sizes(body))
    return f"# {title}\n\n{head}.\n\n{body}"


# The block of results/README.md that `reproduce all --from-results` rewrites.
BEGIN = "<!-- main claims: written by `fedjax-appeal reproduce all --from-results` -->"
END = "<!-- end of the main claims -->"


def with_main_claims(readme: str, card: str) -> str:
    """`readme` with the block between BEGIN and END replaced by the scorecard `card`
    (its title dropped: the README's section heading stands above the block)."""
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = card.split("\n", 2)[2].strip("\n")
    return f"{head}{BEGIN}\n\n{body}\n\n{END}{tail}"


def committed_markdown(rows: list[dict[str, Any]]) -> str:
    """scorecard.md of `committed_rows`, with a note on where its numbers come from."""
    return scorecard_markdown(rows, "Scorecard of the main claims, from the committed "
                              "reports") + (
        "\nEach row reads its table's committed `results.json` (the folder named; a `-10` "
        "folder is a rerun of the table on 10 seeds); intervals are 95% paired t intervals "
        "of the per-seed differences (a sign-flip interval where they have no spread), or "
        "the repeated interval of a `--seeds auto` report. Cost: the report's wall time "
        "where it records one. Rebuild: `fedjax-appeal reproduce all --from-results`.\n")


def committed_scorecard(args: argparse.Namespace) -> int:
    """`reproduce all --from-results`: the scorecard of the committed reports (nothing
    runs), written to `--out` (default results/) as scorecard.md and scorecard.json."""
    if args.seeds or args.quick or args.plan or args.fresh:
        raise ConfigError("reproduce all --from-results reads the committed reports and runs "
                          "nothing: drop --seeds / --quick / --plan / --fresh")
    root = Path(args.out) if args.out else RESULTS
    rows = committed_rows(RESULTS)
    md = committed_markdown(rows)
    writers = {"scorecard.md": lambda p: p.write_text(md),
               "scorecard.json": lambda p: p.write_text(json.dumps(
                   {"command": "fedjax-appeal reproduce all --from-results", "rows": rows},
                   indent=1, default=str))}
    readme = root / "README.md"
    if readme.is_file() and BEGIN in readme.read_text():  # the block of the main claims
        text = with_main_claims(readme.read_text(), md)
        writers["README.md"] = lambda p: p.write_text(text)
    write_outputs(root, writers)
    print(md)
    print(f"wrote {root}/scorecard.md, scorecard.json")
    return 0


def run_all(args: argparse.Namespace) -> int:
    """`reproduce all`: see the module docstring."""
    if args.options:
        raise ConfigError("reproduce all takes no --set (each table has its own options): "
                          "run that table alone with its --set")
    if args.robustness:
        raise ConfigError("reproduce all runs the tables; --robustness reruns one table at "
                          "other lrs: run reproduce NAME --robustness")
    if getattr(args, "from_results", False):
        return committed_scorecard(args)
    root = Path(args.out or Path("runs") / "reproduce")
    names = [n for n in reproduce.CLAIMS if n in reproduce.EXPERIMENTS]
    cmd = "fedjax-appeal reproduce all " + " ".join(
        a for a in (f"--seeds {args.seeds}" if args.seeds else "",
                    f"--seed-batch {args.seed_batch}" if args.seed_batch else "",
                    "--quick" if args.quick else "") if a)
    ctxs = [reproduce.make_context(args, n, root / (n + ("-quick" if args.quick else "")),
                         command=cmd.replace(" all", f" {n}"))
            for n in names]  # every argument checked before the first run
    for c in ctxs:
        c.clock = None  # each table's cost is its own (not the whole command's)
    est = {}
    for c in ctxs:
        n = c.design.max_seeds if c.design is not None else len(c.seeds)
        est[c.name] = estimate(c.name, n, len(reproduce.SEEDS.get(c.name, ())) or 3)
    print(f"reproduce all: {len(ctxs)} tables into {root}/ (seeds: "
          f"{args.seeds or 'each table its own'})")
    for c in ctxs:
        s, src = est[c.name]
        print(f"  {c.name:22s} {duration(s):>12s}  ({src})")
    known = [s for s, _ in est.values() if s is not None]
    print(f"  estimated total {duration(sum(known))}"
          + (f" + {len(est) - len(known)} table(s) without an estimate"
             if len(known) < len(est) else "")
          + " (tables that share runs compute them once: the run cache)", flush=True)
    if args.plan:
        return 0
    rows: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    for i, c in enumerate(ctxs):
        left = [est[x.name][0] for x in ctxs[i:]]
        eta = sum(s for s in left if s is not None)
        print(f"[{i + 1}/{len(ctxs)}] {c.name}: estimated {duration(est[c.name][0])}; "
              f"this and the tables after it: {duration(eta)}; elapsed "
              f"{duration(time.perf_counter() - t_all)}", flush=True)
        t0 = time.perf_counter()
        fn = reproduce.EXPERIMENTS[c.name][0]
        try:
            reproduce.run_context(c, fn)
            data = json.loads((c.out / "results.json").read_text())
            if c.design is None:
                c.claim = reproduce.CLAIMS[c.name]
            row = main_row(c, data)
        except (ConfigError, OSError, ValueError, RuntimeError) as e:
            traceback.print_exc()
            row = {"table": c.name, "claim": reproduce.CLAIMS[c.name].label,
                   "failed": f"{type(e).__name__}: {e}".splitlines()[0][:120]}
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
        print(f"[{i + 1}/{len(ctxs)}] {c.name}: {row.get('verdict', 'failed')} in "
              f"{duration(row['wall_s'])}", flush=True)
    title = f"Scorecard of the main claims: `{cmd}`"
    md = scorecard_markdown(rows, title)
    write_outputs(root, {"scorecard.md": lambda p: p.write_text(md),
                         "scorecard.json": lambda p: p.write_text(json.dumps(
                             {"command": cmd, "rows": rows}, indent=1, default=str))})
    print(md)
    print(f"wrote {root}/scorecard.md, scorecard.json "
          f"({duration(time.perf_counter() - t_all)})")
    return 0 if not any(r.get("failed") for r in rows) else 1
