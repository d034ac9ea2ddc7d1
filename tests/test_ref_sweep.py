"""Every row of a vmapped sweep equals its configuration run one by one with `simulate`.

Four runs (2 client lr x 2 seeds) in batches of 3, with every way of laying a batch out
(one vmap, a loop over single runs, a loop over pairs): the rows occupy every slot of a full
batch and the first slot of a padded one, and each row's whole history (every key, every
evaluation) must equal its own run's, so a row given another row's results is caught.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import model_for
from fedjax_appeal.data import load_federated
from fedjax_appeal.run.simulate import simulate
from fedjax_appeal.run.sweep import sweep

CFG = RunConfig(algorithm="fedavg", dataset="synthetic", partition="natural", clients=5,
                unseen_clients=2, cohort=3, rounds=2, local_steps=2, batch_size=4,
                eval_every=1, min_samples=4, appeal=False)


GRID = {"client_lr": [0.3, 0.05]}
SEEDS = [0, 3]


@pytest.fixture(scope="module")
def runs():
    """The data and each (client lr, seed)'s own `simulate` history, computed once for the
    three layouts below (the reference does not depend on how the sweep lays out a batch)."""
    data, ds = load_federated(CFG)
    model = model_for(CFG.model, data, ds)
    alg = build("fedavg", model, CFG)
    refs = {(lr, seed): simulate(alg, data, HParams(client_lr=lr), jax.random.key(seed),
                                 rounds=CFG.rounds, eval_every=CFG.eval_every).history
            for lr in GRID["client_lr"] for seed in SEEDS}
    return data, ds, refs


# lanes: None = the default (1 on CPU: a lax.map over the batch), 0 = one vmap over the
# batch, 2 = a lax.map over pairs with a remainder of 1.
@pytest.mark.parametrize("lanes", [None, 0, 2])
def test_every_sweep_row_equals_its_run(runs, lanes):
    data, ds, refs = runs
    res = sweep(CFG, GRID, SEEDS, data=data, dataset=ds, max_parallel=3, lanes=lanes)
    assert len(res.rows) == 4
    assert [(r["hparams"]["client_lr"], r["seed"]) for r in res.rows] == [
        (0.3, 0), (0.3, 3), (0.05, 0), (0.05, 3)]
    finals = []
    for row in res.rows:
        assert set(row["hparams"]) == {"client_lr"}  # the reference's HParams
        ref = refs[(row["hparams"]["client_lr"], row["seed"])]
        assert [h["round"] for h in row["history"]] == [0, 1, 2]
        for a, b in zip(row["history"], ref, strict=True):
            assert set(a) == set(b)
            for k in b:
                np.testing.assert_allclose(a[k], b[k], rtol=2e-4, atol=2e-5,
                                           err_msg=f"{row['label']} seed {row['seed']} {k}")
        assert row["final"] == row["history"][-1]
        finals.append(row["final"]["train_loss"])
    # the rows differ from each other, so a row holding a neighbour's results cannot pass
    assert len({round(v, 6) for v in finals}) == 4
