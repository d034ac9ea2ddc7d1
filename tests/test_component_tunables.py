"""Tunables declared by their components: `HParams` keeps the two learning rates, every
other hyperparameter is declared in the file of the component that reads it, and still
builds, reads, stacks, validates and shows like a field."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.core.config import HParams, RunConfig, declarations
from fedjax_appeal.core.errors import ConfigError
from fedjax_appeal.core.fields import OPTIONS, option
from fedjax_appeal.core.tunables import TUNABLES
from fedjax_appeal.run.schema import check_declared

# tunable -> the module that declares it (the component that reads it)
OWNERS = {
    "qffl_q": "fedjax_appeal.algorithms.qffl", "afl_q": "fedjax_appeal.algorithms.qffl",
    "maxfl_eps": "fedjax_appeal.algorithms.maxfl", "mwfed_eta": "fedjax_appeal.algorithms.mwfed",
    "prox_mu": "fedjax_appeal.algorithms.fedavg",
    "fedfor_lambda": "fedjax_appeal.algorithms.fedfor",
    "perfedavg_beta": "fedjax_appeal.algorithms.perfedavg",
    "pfedme_lambda": "fedjax_appeal.algorithms.pfedme",
    "staleness_power": "fedjax_appeal.algorithms.fedbuff",
    "exp_alpha": "fedjax_appeal.aggregate.aggregation",
    "server_momentum": "fedjax_appeal.aggregate.server",
    "byzantine_noise": "fedjax_appeal.aggregate.adversary",
    "dp_clip": "fedjax_appeal.aggregate.privacy",
    "union_mu": "fedjax_appeal.select.selectors", "subtrunc_b": "fedjax_appeal.select.selectors",
    "avail_p": "fedjax_appeal.select.availability", "steps_sigma": "fedjax_appeal.local.hetero",
    "solo_lr": "fedjax_appeal.protocols.appeal.requirement",
}


def test_hparams_keeps_the_learning_rates_and_components_declare_the_rest():
    names = [f.name for f in declarations(HParams)]
    assert names[:2] == ["client_lr", "server_lr"]  # the two declared with the records
    assert {OPTIONS[n].origin for n in names[:2]} == {"fedjax_appeal.core.config"}
    assert len(names) == len(set(names)) >= 34
    for name, module in OWNERS.items():
        assert OPTIONS[name].origin == module, name
    assert not any(OPTIONS[n].origin.startswith("fedjax_appeal.core") for n in TUNABLES)


def test_a_declared_tunable_builds_and_reads_like_a_field():
    hp = HParams(client_lr=0.1, qffl_q=2.5)
    assert hp.extra == {"qffl_q": 2.5} and hp.qffl_q == 2.5 and hp.client_lr == 0.1
    assert hp.exp_alpha == TUNABLES["exp_alpha"].default == 0.2  # the declared default
    r = hp.replace(exp_alpha=0.7)
    assert (r.exp_alpha, r.qffl_q, r.client_lr) == (0.7, 2.5, 0.1)
    assert HParams.make(qffl_q=2.5) == HParams(qffl_q=2.5)
    with pytest.raises(ConfigError, match="unknown hyperparameter 'qffl_qq'; did you mean "
                                          "'qffl_q'"):
        HParams(qffl_qq=1.0)
    with pytest.raises(AttributeError):
        _ = hp.not_a_tunable


def test_declared_tunables_stack_and_vmap_like_fields():
    hps = [HParams(qffl_q=q).as_arrays() for q in (0.0, 1.0, 3.0)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *hps)
    out = jax.vmap(lambda h: h.qffl_q * h.client_lr + h.exp_alpha)(stacked)
    np.testing.assert_allclose(np.asarray(out), [0.2, 0.25, 0.35], rtol=1e-6)
    assert set(stacked.extra) == set(TUNABLES)


def test_a_declared_range_is_checked_for_tunables_too():
    with pytest.raises(ConfigError, match="--dp-quantile must be in \\[0, 1\\] \\(got 1.5\\)"):
        check_declared(RunConfig(), HParams(dp_quantile=1.5))
    with pytest.raises(ConfigError, match="--solo-lr must be >= 0 .*0 = same = the client lr"):
        check_declared(RunConfig(), HParams(solo_lr=-1.0))
    check_declared(RunConfig(), HParams(dp_quantile=1.0, solo_lr=0.0))
    (f,) = [f for f in declarations(HParams) if f.name == "avail_p"]
    assert f.metadata["group"] == "hetero" and f.metadata["range"] == {"ge": 0.0, "le": 1.0}


def test_a_tunable_declaration_refuses_a_builtin_name_a_bad_group_or_range():
    with pytest.raises(ConfigError, match="'exp_alpha' is already a configuration key"):
        option("exp_alpha", 1.0, "x", tunable=True)
    with pytest.raises(ConfigError, match="group must be one of"):
        option("my_rate_x", 1.0, "x", tunable=True, group="nowhere")
    with pytest.raises(ConfigError, match="outside its range"):
        option("my_rate_y", -1.0, "x", tunable=True, gt=0)
    assert "my_rate_x" not in TUNABLES and "my_rate_y" not in TUNABLES
