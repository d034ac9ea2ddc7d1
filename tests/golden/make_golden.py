"""Fixed-seed histories of every registered algorithm, for the identical-history check.

`python tests/golden/make_golden.py` runs each case below for a few rounds on a tiny fixed
federation on CPU and writes `histories.json` next to this file: every history entry (floats
at full precision), the per-round cohort indices, weights and cohort loss, and a digest of
the final server parameters. `tests/test_golden.py` re-runs every case and compares.
Regenerate only when a change of behaviour is intended.
"""

from __future__ import annotations

import json
import os
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, "histories.json")
ROUNDS = 3

# name -> (algorithm, RunConfig overrides, HParams overrides, data variant)
BASE = dict(clients=6, unseen_clients=2, cohort=3, local_steps=2, batch_size=4, rho_steps=3)
CASES: dict[str, tuple[str, dict, dict, str]] = {
    "fedavg": ("fedavg", {}, {}, "plain"),
    "fedprox": ("fedprox", {}, {"prox_mu": 0.5}, "plain"),
    "fedbn": ("fedbn", {}, {}, "bn"),
    "fedfor": ("fedfor", {}, {}, "plain"),
    "maxfl": ("maxfl", {}, {}, "plain"),
    "incfl": ("incfl", {"requirement": "0.9"}, {}, "plain"),
    "mwfed": ("mwfed", {}, {"mwfed_eta": 0.7}, "plain"),
    "perfedavg": ("perfedavg", {}, {}, "plain"),
    "perfedavg-hf": ("perfedavg", {"perfedavg_variant": "hf"}, {}, "plain"),
    "pfedme": ("pfedme", {"pfedme_k": 2}, {"pfedme_beta": 0.8}, "plain"),
    "qffl": ("qffl", {}, {"qffl_q": 2.0}, "plain"),
    "afl": ("afl", {}, {}, "plain"),
    "scaffold": ("scaffold", {}, {}, "plain"),
    # weight rules
    "fedavg-uniform": ("fedavg", {"aggregation": "uniform"}, {}, "plain"),
    "fedavg-exp-alpha": ("fedavg", {"aggregation": "exp-alpha"}, {}, "plain"),
    "fedavg-exp-alpha-n": ("fedavg", {"aggregation": "exp-alpha-n"}, {}, "plain"),
    "scaffold-exp-alpha": ("scaffold", {"aggregation": "exp-alpha"}, {}, "plain"),
    "fedfor-exp-alpha": ("fedfor", {"aggregation": "exp-alpha"}, {}, "plain"),
    "fedbn-exp-alpha": ("fedbn", {"aggregation": "exp-alpha"}, {}, "bn"),
    "perfedavg-exp-alpha": ("perfedavg", {"aggregation": "exp-alpha-n"}, {}, "plain"),
    "pfedme-exp-alpha": ("pfedme", {"aggregation": "exp-alpha", "pfedme_k": 2}, {}, "plain"),
    # server optimizers
    "fedavg-adam": ("fedavg", {"server_opt": "adam"}, {"server_lr": 0.1}, "plain"),
    "fedavg-yogi": ("fedavg", {"server_opt": "yogi"}, {"server_lr": 0.1}, "plain"),
    "fedavg-nesterov": ("fedavg", {"server_opt": "nesterov"}, {}, "plain"),
    "mwfed-momentum": ("mwfed", {"server_opt": "momentum"}, {}, "plain"),
    # selectors
    "fedavg-poc": ("fedavg", {"selector": "poc"}, {}, "plain"),
    "fedavg-divfl": ("fedavg", {"selector": "divfl"}, {}, "plain"),
    "fedavg-subtrunc": ("fedavg", {"selector": "subtrunc", "feature_dim": 8}, {}, "plain"),
    "fedavg-unionfl": ("fedavg", {"selector": "unionfl", "selector_features": "delta"}, {},
                       "plain"),
    "fedavg-stratified": ("fedavg", {"selector": "stratified", "cohort_groups": "2,1"}, {},
                          "groups"),
    # chunked cohorts
    "fedavg-chunked": ("fedavg", {"client_chunk": 2}, {}, "plain"),
    "maxfl-chunked": ("maxfl", {"client_chunk": 2}, {}, "plain"),
    "scaffold-chunked": ("scaffold", {"client_chunk": 2, "aggregation": "exp-alpha"}, {},
                         "plain"),
    # Byzantine clients
    "maxfl-byzantine": ("maxfl", {}, {}, "byzantine"),
    "qffl-byzantine": ("qffl", {}, {}, "byzantine"),
    "fedavg-exp-alpha-byzantine": ("fedavg", {"aggregation": "exp-alpha"}, {}, "byzantine"),
    # heterogeneous and unreliable clients
    "fednova": ("fednova", {"local_steps_dist": "uniform", "local_steps": 3}, {}, "plain"),
    "fedavg-unreliable": ("fedavg", {"local_steps_dist": "lognormal", "local_steps": 3,
                                     "availability": "markov", "deadline": 3.0}, {}, "plain"),
    "fedbuff": ("fedbuff", {"concurrency": 4}, {}, "plain"),
}


class BNNet(nn.Module):
    """Dense-BatchNorm-relu-Dense: the smallest model FedBN accepts."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(4)(x.reshape((x.shape[0], -1)))
        x = nn.BatchNorm(use_running_average=not train)(x)
        return nn.Dense(3)(nn.relu(x))


def _arrays(rng, sizes, dim, classes):
    from fedjax_appeal.core.arrays import ClientArrays

    xs = [rng.normal(size=(n, dim)).astype(np.float32) for n in sizes]
    ys = [rng.integers(0, classes, n) for n in sizes]
    idx, o = [], 0
    for x in xs:
        idx.append(np.arange(o, o + len(x)))
        o += len(x)
    return ClientArrays.from_indices(np.concatenate(xs), np.concatenate(ys), idx)


def tiny_setup(variant: str):
    """(model, data): 6 seen + 2 unseen clients, 5 features, 3 classes, fixed numbers."""
    from fedjax_appeal.core.arrays import FederatedData
    from fedjax_appeal.core.models import Model, make_model

    rng = np.random.default_rng(1234)
    sizes = [7, 12, 5, 16, 9, 11, 8, 10]
    tr = _arrays(rng, sizes[:6], 5, 3)
    te = _arrays(rng, [max(2, s // 2) for s in sizes[:6]], 5, 3)
    utr = _arrays(rng, sizes[6:], 5, 3)
    ute = _arrays(rng, [4, 5], 5, 3)
    info = {}
    if variant == "byzantine":
        info = {"byzantine": jnp.array([False, True, False, False, True, False])}
    if variant == "groups":
        info = {"group": jnp.array([0, 0, 0, 0, 1, 1], jnp.int32)}
    data = FederatedData(train=tr, test=te, unseen_train=utr, unseen_test=ute, info=info,
                         num_classes=3, name="golden")
    if variant == "bn":
        return Model(BNNet(), (5,), jnp.float32, "bnnet"), data
    return make_model("logistic", "golden", 3, (5,), jnp.float32, scale=1.0), data


def run_case(name: str) -> dict:
    """One case's record: history, per-round cohort values, final parameter digest."""
    from fedjax_appeal.algorithms import build
    from fedjax_appeal.core.config import HParams, RunConfig
    from fedjax_appeal.run.simulate import simulate

    alg_name, cfg_kw, hp_kw, variant = CASES[name]
    model, data = tiny_setup(variant)
    cfg = RunConfig(algorithm=alg_name, **{**BASE, **cfg_kw})
    hp = HParams(client_lr=0.1, **hp_kw)
    alg = build(alg_name, model, cfg)
    res = simulate(alg, data, hp, jax.random.key(7), rounds=ROUNDS, eval_every=1)
    rm = res.round_metrics
    digest = [[float(np.sum(np.asarray(a, np.float64))),
               float(np.sum(np.abs(np.asarray(a, np.float64))))]
              for a in jax.tree.leaves(res.final_state.params)]
    return {
        "history": [{k: float(v) for k, v in e.items()} for e in res.history],
        "cohort_idx": np.asarray(rm["cohort_idx"]).astype(int).tolist(),
        "cohort_weights": np.asarray(rm["cohort_weights"], np.float64).tolist(),
        "cohort_loss": np.asarray(rm["cohort_loss"], np.float64).tolist(),
        "params_digest": digest,
    }


def main(names: list[str]) -> None:
    out = {}
    if os.path.exists(PATH) and names:
        with open(PATH) as f:
            out = json.load(f)
    for name in names or list(CASES):
        out[name] = run_case(name)
        print(name, out[name]["history"][-1]["train_loss"], flush=True)
    with open(PATH, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
