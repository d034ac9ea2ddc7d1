"""Every registered algorithm declares what it supports (`core.capabilities.Supports`), and
every refusal and "has no effect here" message is derived from those flags. The tests run
over the registry, so a new algorithm (built-in or plugin) is covered by its declaration."""

from __future__ import annotations

import pytest
from conftest import assert_refused

from fedjax_appeal.algorithms import ALGORITHMS
from fedjax_appeal.algorithms.base import register
from fedjax_appeal.core.capabilities import SUPPORTS, Supports, owners, supports
from fedjax_appeal.core.config import ConfigError, RunConfig
from fedjax_appeal.run.validate import check_ignored, check_supported

BASE = ["run", "--dataset", "synthetic", "--clients", "8", "--unseen-clients", "0",
        "--cohort", "2", "--rounds", "1", "--appeal", "off"]
# capability -> (flags that need it, the same as RunConfig keywords)
NEEDS = {
    "selector": (["--selector", "poc"], dict(selector="poc")),
    "varied_steps": (["--local-steps-dist", "uniform", "--local-steps-min", "1"],
                     dict(local_steps_dist="uniform", local_steps_min=1)),
    "fednova": (["--aggregation", "fednova"], dict(aggregation="fednova")),
    "uplink": (["--compress", "qsgd"], dict(compress="qsgd")),
    "dp": (["--dp", "fixed", "--aggregation", "uniform"], dict(dp="fixed", aggregation="uniform")),
    "byzantine": (["--byzantine-fraction", "0.25"], dict(byzantine_fraction=0.25)),
    "availability": (["--availability", "bernoulli"], dict(availability="bernoulli")),
    "layouts": (["--client-lanes", "2"], dict(client_lanes=2)),
}
CASES = [(a, c) for a in sorted(ALGORITHMS) for c in NEEDS]


def test_every_registered_algorithm_declares_its_capabilities():
    assert set(SUPPORTS) == set(ALGORITHMS)
    for name in ALGORITHMS:
        sup = supports(name)
        from fedjax_appeal.core.config import HParams, field_names

        fields = set(field_names(RunConfig))
        known = fields | set(field_names(HParams))
        assert set(sup.options) <= known, name


@pytest.mark.parametrize("alg,cap", CASES)
def test_unsupported_option_is_refused_in_one_line_and_supported_one_accepted(
        alg, cap, tmp_path, capsys):
    flags, kw = NEEDS[cap]
    if getattr(supports(alg), cap):
        check_supported(RunConfig(algorithm=alg, **kw))  # no capability refusal
        return
    with pytest.raises(ConfigError):
        check_supported(RunConfig(algorithm=alg, **kw))
    out = tmp_path / "run"
    assert_refused([*BASE, "--algorithm", alg, *flags, "--out", str(out)], out, capsys, "")


@pytest.mark.parametrize("alg", sorted(ALGORITHMS))
def test_options_of_other_algorithms_have_no_effect(alg):
    sup = supports(alg)
    others = {o for n in SUPPORTS for o in SUPPORTS[n].options} - set(sup.options)
    assert others  # every algorithm leaves some other algorithm's options unused
    for key in sorted(others):
        with pytest.raises(ConfigError, match=f"--{key.replace('_', '-')} has no effect here"
                                              f".*it configures --algorithm"):
            check_ignored(RunConfig(algorithm=alg), {key})
    for key in sup.options:  # its own options are taken
        check_ignored(RunConfig(algorithm=alg), {key})
    if not sup.aggregation:
        with pytest.raises(ConfigError, match="--aggregation has no effect here"):
            check_ignored(RunConfig(algorithm=alg), {"aggregation"})


def test_fedbuff_refuses_what_its_event_loop_does_not_run(tmp_path, capsys):
    """FedBuff bypasses the shared executor and the uplink: both are refused, never ignored."""
    for flags, msg in ((["--compress", "topk"], "uncompressed"),
                       (["--client-lanes", "4"], "own event loop")):
        out = tmp_path / "run"
        assert_refused([*BASE, "--algorithm", "fedbuff", *flags, "--out", str(out)], out,
                       capsys, msg)


def test_a_plugin_algorithm_declares_its_capabilities():
    from fedjax_appeal.algorithms.fedavg import fedavg

    register("toy-no-uplink", Supports(uplink=False, options=("prox_mu",)))(fedavg)
    try:
        with pytest.raises(ConfigError, match="does not compress"):
            check_supported(RunConfig(algorithm="toy-no-uplink", compress="qsgd"))
        assert "toy-no-uplink" in owners("prox_mu")
        check_ignored(RunConfig(algorithm="toy-no-uplink"), {"prox_mu"})
        with pytest.raises(ConfigError, match="toy-no-uplink"):
            check_ignored(RunConfig(algorithm="fedavg"), {"prox_mu"})
    finally:
        del ALGORITHMS["toy-no-uplink"]
        del SUPPORTS["toy-no-uplink"]


def test_component_options_are_refused_by_their_declarations():
    """Every option a component declares as its own (`run.validate.component_options`) is
    refused, naming that component, for a configuration that builds another one, and
    accepted for one that builds it."""
    from fedjax_appeal.run.validate import component_options, ignored_reason

    checked = 0
    for field, owned in component_options():
        for name, keys in owned.items():
            other = next(n for n in ("none", "off", "random", "natural", "fmnist", "qsgd")
                         if n not in owned and n != name)
            for key in keys:
                msg = ignored_reason(key, RunConfig(**{field: other}))
                assert msg is not None and f"--{field} " in msg and name in msg, (key, msg)
                builds = RunConfig(**{field: name, "union_base": "subtrunc"})
                assert ignored_reason(key, builds) is None, (field, name, key)
                checked += 1
    assert checked >= 30


def test_switched_options_are_refused_by_their_declarations():
    """Every option a switched-on part declares (`run.validate.switched_options`: the appeal
    protocol, solo models, the imbalanced pool, label flipping, Byzantine clients, SubTrunc
    under UnionFL, the local-steps distributions, the availability models, the simulated
    step times of the deadline, the client optimizer's hyperparameters) is refused with
    that part's reason in a configuration where the part is off, and not by it where the
    part is on; each part is found both ways in a small grid."""
    import itertools

    from fedjax_appeal.run.validate import ignored_reason, switched_options

    grid = dict(algorithm=["fedavg", "maxfl"], appeal=["off", "on"],
                selector=["random", "unionfl"], union_base=["divfl", "subtrunc"],
                imbalance_ratios=["", "1.0"], label_flip_fraction=[0.0, 0.3],
                byzantine_fraction=[0.0, 0.1],
                local_steps_dist=["fixed", "lognormal", "epochs"],
                availability=["always", "bernoulli", "markov"], deadline=[0.0, 2.0],
                client_opt=["sgd", "adam"])
    cfgs = [RunConfig(**dict(zip(grid, v, strict=True)))
            for v in itertools.product(*grid.values())]
    declared = switched_options()
    assert len(declared) >= 7
    for sw in declared:
        off = [c for c in cfgs if not sw.active(c, supports(c.algorithm))]
        on = [c for c in cfgs if sw.active(c, supports(c.algorithm))]
        assert off and on, sw.reason
        for key in sw.options:
            assert all(ignored_reason(key, c) == sw.reason for c in off), (key, sw.reason)
            assert all(ignored_reason(key, c) != sw.reason for c in on), (key, sw.reason)
