"""`expalpha-gaps` (diagnostic): F_k(w), F_k(w_k) and the Exp-alpha logit per imbalance
ratio at the global model of a proportional FedAvg run, shared vs random majors."""

from __future__ import annotations

import jax
import numpy as np

import fedjax_appeal  # run_config through the package: tests replace it
from fedjax_appeal import HParams, RunConfig
from fedjax_appeal.extend import client_loss, local_sgd, model_for
from papers.expalpha.report import header, meta
from papers.expalpha.runs import (
    load,
)
from papers.expalpha.settings import (
    make_cfg,
    make_hp,
    seeds_of,
)
from papers.expalpha.specs import (
    ALPHA,
    BY_LABEL,
    OPTIONS,
)
from papers.reproduce import Context, experiment, markdown_table


def client_gaps(model, cfg: RunConfig, hp: HParams, params, mstate, data, key
                ) -> dict[str, np.ndarray]:
    """F_k(w), F_k(w_k) and the Exp-alpha logit gap F_k(w_k) − F_k(w) of every pool client
    after `cfg.local_steps` local SGD steps from the global model w (vmapped, one jit)."""
    def one(k, kk):
        res = local_sgd(model, params, mstate, data.train, k, kk, hp.client_lr,
                        steps=cfg.local_steps, batch_size=cfg.batch_size)
        before = client_loss(model, params, mstate, data.train, k)[0]
        after = client_loss(model, res.params, res.state, data.train, k)[0]
        return before, after

    ks = jax.numpy.arange(data.num_clients)
    before, after = jax.jit(jax.vmap(one))(ks, jax.random.split(key, data.num_clients))
    before, after = np.asarray(before, np.float64), np.asarray(after, np.float64)
    return {"before": before, "after": after, "gap": after - before}


@experiment("expalpha-gaps", "Exp-alpha diagnostic: F_k(w), F_k(w_k) and the weight logit "
                             "per imbalance ratio at the global model of a FedAvg run",
            options=OPTIONS)
def expalpha_gaps(ctx: Context) -> None:
    fedavg = BY_LABEL["FedAvg"]
    checkpoints = (10, 50) if not ctx.quick else (2,)
    rows, raw = [], {}
    for setting in ("imbalance", "imbalance-random"):
        for seed in seeds_of(ctx):
            for r in checkpoints:
                cfg = make_cfg(ctx, setting, seed, fedavg, "proportional").replace(
                    rounds=r, eval_every=r)
                hp = make_hp(ctx, fedavg).as_arrays()
                data, ds = load(cfg)
                _, sim = fedjax_appeal.run_config(cfg, make_hp(ctx, fedavg), data=data, dataset=ds)
                model = model_for(cfg.model, data, ds, cfg.conv_impl, cfg.precision)
                st = sim.final_state
                g = client_gaps(model, cfg, hp, st.params, st.model_state, data,
                                jax.random.key(1000 + seed))
                ratio = np.asarray(data.info["imbalance_ratio"])
                for rv in sorted(set(ratio.tolist()), reverse=True):
                    m = ratio == rv
                    raw.setdefault((setting, r, f"{rv:g}"), []).append(
                        [g["before"][m].mean(), g["after"][m].mean(), g["gap"][m].mean()])
    for (setting, r, rv), vals in raw.items():
        v = np.asarray(vals)
        rows.append([setting.replace("imbalance-random", "random majors").replace(
            "imbalance", "shared majors"), str(r), rv,
            f"{v[:, 0].mean():.3f} ± {v[:, 0].std():.3f}",
            f"{v[:, 1].mean():.3f} ± {v[:, 1].std():.3f}",
            f"{v[:, 2].mean():+.3f} ± {v[:, 2].std():.3f}",
            f"{np.exp(v[:, 2].mean() / ALPHA):.3g}"])
    note = ("FedAvg with proportional weights in the `expalpha-imbalance` settings, stopped "
            f"after each of {list(checkpoints)} rounds; at that global model w every one of "
            "the 200 pool clients runs the round's local update (E = 20 steps) and reports "
            "F_k(w) and F_k(w_k) on its train rows. Means per imbalance ratio, mean ± std "
            "over seeds. Exp-α's weight is ∝ exp(gap / α): a more negative gap (a larger "
            "local loss drop) means a smaller weight; the last column is exp(mean gap / α), "
            "the relative weight of a typical client of that ratio.")
    table = (header(ctx, "imbalance", "diagnostic: loss gaps per imbalance ratio", [fedavg],
                    note) + "\n" + markdown_table(
        ["majors", "round", "ratio", "F_k(w)", "F_k(w_k)", "gap F_k(w_k) − F_k(w)",
         "exp(gap/α)"], rows) + "\n")
    ctx.write({"table.md": table,
               "results.json": {**meta(ctx, "imbalance", [fedavg]),
                                "checkpoints": list(checkpoints),
                                "rows": rows}})
