"""Run a `papers.spec.Table`: every (setting, arm, seed) through `Context.run` (the run
cache, progress), data loaded once per data configuration, with the library's public API
only. An arm whose algorithm is not registered, or whose hyperparameters are not HParams
fields, is skipped with a logged note ("not available"); a run that fails is logged and
marks its arm failed without losing the others.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

import fedjax_appeal  # load_federated through the package: tests replace it
from fedjax_appeal import HParams, common_shapes, data_fields, field_names, pad_federation, shape_of
from fedjax_appeal.extend import ALGORITHMS
from papers.reproduce import Context
from papers.spec import Table

NA = "not available"


def hparams(*dicts: dict) -> HParams | None:
    """HParams from merged dicts; None when a key is not a field (its algorithm missing)."""
    kw: dict[str, Any] = {}
    for d in dicts:
        kw.update(d)
    if any(k not in field_names(HParams) for k in kw):
        return None
    return HParams.make(**kw)


def run_table(ctx: Context, table: Table, record: Callable[[dict, Any], dict], *,
              reverse: bool = False, keep_going: bool = True) -> dict[str, Any]:
    """Run every (setting, arm, seed) of `table`, seeds outer and arms inner within a
    setting (so an interrupted experiment leaves whole seeds in the run cache); returns
    {setting: {arm: record}} with record {"status", "runs": [{"seed"} + record(results,
    data) per seed], "config", "hparams"} (None for a setting not run in --quick mode).

    `reverse` runs each seed's arms in reverse order (a second process on the same seeds
    meets the first halfway through the run cache); without `keep_going` a failed run
    raises instead of marking its arm failed."""
    out: dict[str, Any] = {}
    for col in table.settings:
        spec = col.spec(ctx.quick)
        if spec is None:
            ctx.log(f"{col.label}: not run in --quick mode")
            out[col.label] = None
            continue
        out[col.label] = recs = {}
        for v in table.arms:
            if v.algorithm not in ALGORITHMS:
                ctx.log(f"{v.label}: algorithm '{v.algorithm}' is not registered; skipped")
                recs[v.label] = {"status": NA}
            elif hparams(table.base_hp, col.hp, col.tuned(v.algorithm)[1], v.hp) is None:
                ctx.log(f"{v.label}: {sorted(v.hp)} are not declared hyperparameters; "
                        "skipped")
                recs[v.label] = {"status": NA}
            else:
                recs[v.label] = {"status": "ok", "runs": [], "config": None, "hparams": None}
        arms = table.arms[::-1] if reverse else table.arms
        runs = []  # (arm, config, hyperparameters, data key) in running order
        for seed in table.seeds(ctx.seeds, ctx.quick):
            for v in arms:
                if recs[v.label]["status"] != "ok":
                    continue
                t_cfg, t_hp = col.tuned(v.algorithm)
                cfg = ctx.base(**{**table.base_cfg, **spec, **t_cfg, **v.cfg,
                                  "algorithm": v.algorithm, "seed": seed})
                runs.append((v, cfg, hparams(table.base_hp, col.hp, t_hp, v.hp),
                             tuple(getattr(cfg, f) for f in data_fields())))
        shapes = data_shapes(ctx, col.label, [(cfg, hp, dkey) for _, cfg, hp, dkey in runs])
        cache: dict[tuple, Any] = {}
        for v, cfg, hp, dkey in runs:
            rec = recs[v.label]
            seed = cfg.seed
            if rec["status"] != "ok":
                continue
            try:
                if dkey not in cache:
                    cache.clear()
                    t = time.perf_counter()
                    with ctx.phase(f"loading the data ({cfg.dataset}, {cfg.partition} "
                                   f"partition over {cfg.clients + cfg.unseen_clients} "
                                   "clients)"):
                        data, ds = fedjax_appeal.load_federated(cfg)
                        if dkey in shapes:
                            data = pad_federation(data, shapes[dkey])
                    ctx.spent.add_data(time.perf_counter() - t)
                    cache[dkey] = data, ds
                data, ds = cache[dkey]
                res, _ = ctx.run(cfg, hp, label=f"{col.label}/{v.label}", data=data,
                                 dataset=ds)
            except Exception as e:  # an arm failing must not lose the others
                if not keep_going:
                    raise
                ctx.log(f"{v.label} seed {seed} failed: {e!r}")
                traceback.print_exc()
                rec["status"] = f"failed: {type(e).__name__}"
                continue
            rec["config"], rec["hparams"] = res["config"], res["hparams"]
            rec["runs"].append({"seed": seed, **record(res, data)})
    return out


def data_shapes(ctx: Context, label: str, runs: list[tuple]) -> dict[tuple, Any]:
    """data key -> the shape its federation is padded to (`fedjax_appeal.common_shapes`),
    for the runs (config, hyperparameters, data key) of a setting that the run cache does
    not hold: the seeds then share the compiled programs (a table's seeds differ in their
    number of rows and largest client; the padding changes no value). Each federation is
    loaded once more here; one that fails to load is left to its run to report."""
    found: dict[tuple, Any] = {}
    t = time.perf_counter()
    with ctx.phase(f"reading the shapes of the federations of {label}"):
        for cfg, hp, dkey in runs:
            if dkey in found or ctx.cached(cfg, hp):
                continue
            try:
                data = fedjax_appeal.load_federated(cfg)[0]
            except Exception:  # noqa: BLE001 - the run reports it
                continue
            if not data.vocab_size:  # (token data run unpadded: `pad_federation`)
                found[dkey] = shape_of(data)
    ctx.spent.add_data(time.perf_counter() - t)  # (loading, counted as data)
    keys = list(found)
    targets = common_shapes([found[k] for k in keys])
    if len(keys) > 1:
        own = len({repr(sorted(found[k].items())) for k in keys})
        ctx.log(f"{label}: {len(keys)} federations, {own} shape(s), padded to "
                f"{len({repr(sorted(t.items())) for t in targets})}")
    return dict(zip(keys, targets, strict=True))
