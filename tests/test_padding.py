"""`core.padding`: federations of several seeds padded to one shape compute every value
of a run exactly as unpadded (solo models, rounds, evaluations, fine-tuning), and the
shapes are grouped and floored as documented."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_tiny_data

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.core.padding import (
    MIN_ROWS,
    ROW_CHUNK,
    SplitShape,
    common_shapes,
    pad_federation,
    pad_rows,
    shape_of,
)
from fedjax_appeal.evaluate.evaluation import evaluate_split
from fedjax_appeal.local.client import client_loss
from fedjax_appeal.protocols.appeal.appeal import OPTIONS, personalize, with_appeal
from fedjax_appeal.run.simulate import simulate

# train: 6 clients of 260-520 rows (S = 2110 >= MIN_ROWS, max_count 520 >= ROW_CHUNK); test:
# half of each (S = 1055: its rows stay, max_count 260 is padded)
SIZES = [300, 260, 400, 520, 280, 350]


def _data(unseen=0, seed=0):
    sizes = SIZES + [310, 290][:unseen]
    return make_tiny_data(num_clients=6, unseen=unseen, seed=seed, sizes=sizes)


def _model():
    return make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)


def _equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_common_shapes_group_within_the_waste_and_keep_the_floors():
    def fed(rows, mc, test_rows=1000, test_mc=100):
        return {"train": SplitShape(rows, mc), "test": SplitShape(test_rows, test_mc)}

    shapes = [fed(3000, 300), fed(4000, 500), fed(2500, 280), fed(9000, 700)]
    out = common_shapes(shapes)
    # the first three fit in one group (largest <= 2x smallest): their largest values
    assert out[0] == out[1] == out[2] == fed(4000, 500)
    assert out[3] == fed(9000, 700)  # 9000 > 2 x 2500: a group of its own
    # a dimension below its floor is never padded: differing values split the groups
    small = [fed(3000, 300, test_rows=1000), fed(3000, 300, test_rows=1001)]
    assert common_shapes(small) == small
    below = [fed(3000, 200), fed(3000, 210)]  # max_count < ROW_CHUNK
    assert common_shapes(below) == below
    # equal values below the floors are fine
    assert common_shapes([fed(3000, 300), fed(3500, 400)]) == [fed(3500, 400)] * 2
    # federations with other splits never share
    other = {"train": SplitShape(3000, 300)}
    assert common_shapes([fed(3000, 300), other])[1] == other


def test_pad_rows_adds_rows_no_client_owns():
    data = _data()
    a = data.train
    p = pad_rows(a, a.num_samples + 77, a.max_count + 40)
    assert p.num_samples == a.num_samples + 77 and p.max_count == a.max_count + 40
    assert p.owned_rows() == a.owned_rows() == a.num_samples
    np.testing.assert_array_equal(np.asarray(p.offset), np.asarray(a.offset))
    np.testing.assert_array_equal(np.asarray(p.count), np.asarray(a.count))
    np.testing.assert_array_equal(np.asarray(p.owner[a.num_samples:]), a.num_clients)
    np.testing.assert_array_equal(np.asarray(p.x[:a.num_samples]), np.asarray(a.x))
    with pytest.raises(ValueError, match="only adds"):
        pad_rows(a, a.num_samples - 1, a.max_count)
    t = data.test  # 1055 rows < MIN_ROWS: rows stay; max_count 260 >= ROW_CHUNK: raised
    assert t.num_samples < MIN_ROWS <= a.num_samples and t.max_count >= ROW_CHUNK
    with pytest.raises(ValueError, match="keeps its shape"):
        pad_rows(t, t.num_samples + 1, t.max_count)
    assert pad_rows(t, t.num_samples, t.max_count + 9).max_count == t.max_count + 9
    with pytest.raises(ValueError, match="splits"):
        pad_federation(data, {"train": shape_of(data)["train"]})
    with pytest.raises(ValueError, match="token data"):  # host-side baselines count rows
        pad_federation(data.replace(vocab_size=10), shape_of(data))


def test_evaluation_and_client_loss_are_unchanged_to_the_bit():
    data = _data()
    model = _model()
    params, state = model.init(jax.random.key(1))
    for a in (data.train, data.test):
        grown = (a.num_samples + 2500) if a.num_samples >= MIN_ROWS else a.num_samples
        p = pad_rows(a, grown, a.max_count + 300)
        _equal(jax.jit(lambda arr: evaluate_split(model, params, state, arr))(a),
               jax.jit(lambda arr: evaluate_split(model, params, state, arr))(p))
        per = jax.jit(jax.vmap(lambda arr, k: client_loss(model, params, state, arr, k),
                               in_axes=(None, 0)))
        ks = jnp.arange(a.num_clients)
        _equal(per(a, ks), per(p, ks))


CFG = RunConfig(clients=6, unseen_clients=2, cohort=3, local_steps=3, batch_size=16,
                rho_steps=4, finetune_steps=2, rounds=4, eval_every=2)


def _run(name, data, cfg=CFG):
    model = _model()
    cfg = cfg.replace(algorithm=name)
    alg = with_appeal(build(name, model, cfg), model, cfg.view(OPTIONS, "appeal"))
    hp = HParams(client_lr=0.1)
    sim = simulate(alg, data, hp, jax.random.key(5), rounds=cfg.rounds,
                   eval_every=cfg.eval_every)
    ft = jax.jit(lambda s, d: personalize(model, cfg.view(OPTIONS, "appeal"), s, d,
                                          jax.random.key(9), hp.as_arrays()))(
        sim.final_state, data)
    return sim.history, sim.round_metrics, sim.final_eval, ft


def _padded(data):
    shape = {n: SplitShape(s.rows + 3000 if s.rows >= MIN_ROWS else s.rows,
                           s.max_count + 200 if s.max_count >= ROW_CHUNK else s.max_count)
             for n, s in shape_of(data).items()}
    out = pad_federation(data, shape)
    assert shape_of(out) != shape_of(data)
    return out


def test_a_padded_federation_runs_fedavg_under_the_appeal_protocol_to_the_bit():
    data = _data(unseen=2)
    _equal(_run("fedavg", data), _run("fedavg", _padded(data)))


@pytest.mark.slow
@pytest.mark.parametrize("name,extra", [
    ("maxfl", {"opt_out_after": 2}),  # loss reports, the appeal pool's evaluation
    ("perfedavg", {}),  # personalised evaluation (per-client sweeps)
    ("fedavg", {"selector": "divfl"}),  # full-data gradients of every client
    ("fedavg", {"selector": "poc"}),  # per-client losses of the candidates
])
def test_a_padded_federation_runs_every_per_row_pass_to_the_bit(name, extra):
    data = _data(unseen=2, seed=1)
    cfg = CFG.replace(**extra)
    _equal(_run(name, data, cfg), _run(name, _padded(data), cfg))
