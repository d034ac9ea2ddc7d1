"""Components receive read-only views of the configuration fields they declare
(`RunConfig.view`): a declared field reads as in the configuration, an undeclared one
raises `UndeclaredOption` naming the field and the component; algorithm builders, plugin
builders and datasets included."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import jax
import numpy as np
import pytest

from fedjax_appeal.aggregate import accounting, privacy, uplink
from fedjax_appeal.aggregate.aggregation import weight_rule
from fedjax_appeal.algorithms import ALGORITHMS, build, compose, register
from fedjax_appeal.algorithms.base import SHARED_OPTIONS, options_for, own_options
from fedjax_appeal.core.capabilities import Supports, algorithm
from fedjax_appeal.core.config import HParams, Options, RunConfig, fields_in
from fedjax_appeal.core.errors import UndeclaredOption
from fedjax_appeal.core.fields import option
from fedjax_appeal.core.registry import registrations
from fedjax_appeal.data import Dataset, data_fields, load_federated
from fedjax_appeal.data.pool import register_dataset
from fedjax_appeal.local import compress, hetero
from fedjax_appeal.local.client import Trained, local_sgd
from fedjax_appeal.protocols.appeal import appeal, requirement
from fedjax_appeal.select import selectors
from tests.conftest import make_tiny_data, tiny_run_config


def test_a_view_reads_its_fields_and_refuses_the_others():
    opts = RunConfig(cohort=7, clients=20).view(("cohort", "clients"), "selector 'x'")
    assert (opts.cohort, opts.clients) == (7, 20)
    assert opts.names == ("cohort", "clients") and "cohort" in opts
    with pytest.raises(UndeclaredOption, match=r"selector 'x' reads .*'rounds'"):
        _ = opts.rounds
    with pytest.raises(UndeclaredOption):  # no silent default either
        getattr(opts, "rounds", 5)
    with pytest.raises(AttributeError):  # not a configuration field at all
        _ = opts.no_such_field
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.cohort = 3


def test_views_narrow_compare_hash_and_pickle():
    cfg = RunConfig(cohort=4)
    opts = cfg.view(("cohort", "clients", "prox_mu"), "a")  # HParams names are left out
    assert opts.names == ("cohort", "clients")
    sub = opts.view(("cohort",), "b")
    assert sub.cohort == 4 and sub.component == "b"
    with pytest.raises(UndeclaredOption, match="'rounds'.*which a"):
        opts.view(("cohort", "rounds"), "b")
    with pytest.raises(ValueError, match="unknown configuration field"):
        cfg.view(("cohort", "kohort"), "c")
    same = RunConfig(cohort=4).view(("clients", "cohort"), "other")
    assert opts == same and hash(opts) == hash(same)
    assert opts != cfg.view(("cohort", "clients"), "a").replace(cohort=5)
    for copied in (pickle.loads(pickle.dumps(opts)), copy.deepcopy(opts)):
        assert copied == opts and copied.component == "a"


def test_declared_options_are_configuration_fields():
    cfg = RunConfig()
    for names in (SHARED_OPTIONS, accounting.OPTIONS, accounting.HEADER_OPTIONS,
                  privacy.CHECK_OPTIONS,
                  privacy.SELECTOR_OPTIONS, uplink.OPTIONS, uplink.CHECK_OPTIONS,
                  compress.OPTIONS, hetero.OPTIONS, selectors.OPTIONS, appeal.OPTIONS,
                  requirement.SOLO_OPTIONS, data_fields()):
        assert set(cfg.view(names, "test").names) == set(names)
    assert set(fields_in("uplink")) <= set(uplink.OPTIONS)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_gets_the_shared_and_its_own_options(name):
    opts = options_for(name, RunConfig(algorithm=name))
    own = set(own_options(name))
    assert set(opts.names) == set(SHARED_OPTIONS) | set(mentioning_selectors()) | own
    others = {n for a in ALGORITHMS for n in own_options(a)} - set(opts.names)
    for field in others:  # another algorithm's own option is not visible
        with pytest.raises(UndeclaredOption, match=name):
            getattr(opts, field)


def mentioning_selectors():
    from fedjax_appeal.core.fields import mentioning

    return mentioning("selector")


@pytest.fixture
def plugin_names():
    """Registrations of the test, undone afterwards."""
    with registrations():
        yield


def _plugin(seen: list, reads_undeclared: bool, name: str = "eval_every"):
    def builder(model, opts, executor=None):
        seen.append(opts)

        def local(state, data, k, key, hp):
            res = local_sgd(model, state.params, state.model_state, data.train, k, key,
                            hp.client_lr, steps=opts.local_steps, batch_size=opts.batch_size)
            return Trained((state.params, state.model_state), (res.params, res.state),
                           res.loss)

        if reads_undeclared:
            _ = getattr(opts, name)
        return compose("probe", model, opts, local=local, weights=weight_rule(opts),
                       executor=executor)

    return builder


def test_a_plugin_builder_gets_a_plain_view_and_runs(tiny_model, plugin_names):
    seen: list[Options] = []
    register("probe-view", Supports())(_plugin(seen, reads_undeclared=False))
    cfg = tiny_run_config(algorithm="probe-view", local_steps=3)
    alg = build("probe-view", tiny_model, cfg)
    assert isinstance(seen[0], Options) and seen[0].local_steps == 3
    data = make_tiny_data(unseen=3)
    hp = HParams().as_arrays()
    state = alg.init(jax.random.key(0), data, hp)
    state, _ = jax.jit(alg.round)(state, data, jax.random.key(1), hp)
    assert int(state.round) == 1


def test_an_undeclared_read_of_a_plugin_fails_loudly(tiny_model, plugin_names):
    register("probe-undeclared", Supports())(_plugin([], reads_undeclared=True))
    declared = algorithm("probe-declared")
    option("probe_every", 2, "an option of the probe", applies=declared)
    register(declared)(_plugin([], reads_undeclared=True, name="probe_every"))
    with pytest.raises(UndeclaredOption, match="'probe-undeclared' reads .*'eval_every'"):
        build("probe-undeclared", tiny_model, tiny_run_config())
    build("probe-declared", tiny_model, tiny_run_config())  # its own declared option


def test_the_data_layer_and_datasets_see_only_data_fields(plugin_names):
    def probe(opts, rng):
        _ = opts.cohort  # a federation field that does not change the data
        return Dataset("probe", np.zeros((4, 2), np.float32), np.zeros(4, int), 2)

    register_dataset("probe-data")(probe)
    with pytest.raises(UndeclaredOption, match="the data layer reads .*'cohort'"):
        load_federated(RunConfig(dataset="probe-data"))


def test_an_undeclared_read_is_refused_when_built_before_any_data_load(plugin_names, tmp_path,
                                                                        capsys):
    """docs/library.md's custom algorithm (FedAvg's local SGD, `sgd_local`, in a plugin):
    without declaring the part it is built on, a run is refused in one line naming the
    declaration to add, before its data are loaded; with it, the run is valid."""
    from fedjax_appeal.aggregate.aggregation import weight_rule as rule
    from fedjax_appeal.algorithms.fedavg import sgd_local
    from fedjax_appeal.cli import main
    from fedjax_appeal.core.errors import ConfigError
    from fedjax_appeal.data.pool import register_dataset
    from fedjax_appeal.run.validate import validate

    loads = []

    @register_dataset("probe-loads")
    def probe(opts, rng):
        loads.append(1)
        return Dataset("probe-loads", np.zeros((40, 2), np.float32), np.arange(40) % 2, 2,
                       np.arange(40) % 4, 1.0, 0.0, 1.0)

    def my_fedavg(model, opts, executor=None):
        return compose("probe-sgd", model, opts, local=sgd_local(model, opts),
                       weights=rule(opts), executor=executor)

    register("probe-sgd")(my_fedavg)
    cfg = RunConfig(algorithm="probe-sgd", dataset="probe-loads", partition="natural",
                    clients=4, unseen_clients=0, cohort=2, min_samples=2)
    want = ("--algorithm probe-sgd reads the option 'local_unroll', which is not declared for "
            "it: declare the part it is built on: register('probe-sgd', "
            "Supports(parts=('sgd_local',)))")
    with pytest.raises(ConfigError) as e:
        validate(cfg, HParams())
    assert str(e.value) == want
    out = tmp_path / "r"
    assert main(["run", "--algorithm", "probe-sgd", "--dataset", "probe-loads", "--partition",
                 "natural", "--clients", "4", "--unseen-clients", "0", "--cohort", "2",
                 "--min-samples", "2", "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"fedjax-appeal: error: {want}\n"
    assert loads == [] and not out.exists()
    register("probe-sgd", Supports(parts=("sgd_local",)))(my_fedavg)
    validate(cfg, HParams())  # the declared part's option is read
