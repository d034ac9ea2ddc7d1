"""Every registered algorithm declares what it supports (`core.capabilities.Supports`), and
every refusal and "has no effect here" message is derived from the options' declarations,
which read those flags. The tests run over the registry, so a new algorithm (built-in or
plugin) is covered by its declaration."""

from __future__ import annotations

import re

import pytest
from conftest import assert_refused

from fedjax_appeal.algorithms import ALGORITHMS
from fedjax_appeal.algorithms.base import own_options, register
from fedjax_appeal.core.capabilities import SUPPORTS, Supports, supports
from fedjax_appeal.core.config import ConfigError, RunConfig
from fedjax_appeal.core.fields import OPTIONS
from fedjax_appeal.core.registry import registrations
from fedjax_appeal.run.validate import check_ignored
from fedjax_appeal.run.validate import check_needs as check_supported

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


def own(alg: str) -> set[str]:
    """The options (static and tunable) declared for algorithm `alg` alone, by name or
    through a part it is built on: they apply to it, not to scaffold (which has none)
    even with a deadline (`step_time_sigma` is also the deadline's)."""
    sup = supports(alg)
    return {n for n, o in OPTIONS.items() if (("algorithm", alg) in o.applies.mentions
            or any(("part", p) in o.applies.mentions for p in sup.parts))
            and not o.applies.test(RunConfig(algorithm="scaffold", deadline=2.0))}


def owners(option: str) -> list[str]:
    """The registered algorithms the option is declared for."""
    return [a for a in sorted(ALGORITHMS) if option in own(a)]


def test_every_registered_algorithm_declares_its_capabilities():
    assert set(SUPPORTS) == set(ALGORITHMS)
    for name in ALGORITHMS:
        assert set(own_options(name)) <= set(OPTIONS), name


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
    others = {o for n in SUPPORTS for o in own(n)} - own(alg)
    assert others  # every algorithm leaves some other algorithm's options unused
    for key in sorted(others):
        with pytest.raises(ConfigError, match=f"--{key.replace('_', '-')} has no effect here"
                                              f".*it configures --algorithm"):
            check_ignored(RunConfig(algorithm=alg), {key})
    for key in own(alg):  # its own options are taken
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

    with registrations():
        register("toy-no-uplink", Supports(uplink=False, parts=("proximal",)))(fedavg)
        with pytest.raises(ConfigError, match="does not compress"):
            check_supported(RunConfig(algorithm="toy-no-uplink", compress="qsgd"))
        assert "toy-no-uplink" in owners("prox_mu")
        check_ignored(RunConfig(algorithm="toy-no-uplink"), {"prox_mu"})
        with pytest.raises(ConfigError, match="toy-no-uplink"):
            check_ignored(RunConfig(algorithm="fedavg"), {"prox_mu"})


COMPONENT_KINDS = ("partition", "dataset", "selector", "compress", "dp", "aggregation",
                   "server_opt")


def test_component_options_are_refused_by_their_declarations():
    """Every option declared for components of a kind (`applies` naming them) is refused,
    naming those components, for a configuration that builds another one, and accepted for
    one that builds it."""
    from fedjax_appeal.run.validate import ignored_reason

    checked = 0
    for field in COMPONENT_KINDS:
        for key, o in OPTIONS.items():
            owned = o.applies.names(field)
            if not owned:
                continue
            other = next(n for n in ("none", "off", "random", "natural", "fmnist", "qsgd",
                                     "sgd", "uniform") if n not in owned)
            msg = ignored_reason(key, RunConfig(**{field: other}))
            assert msg is not None and f"--{field.replace('_', '-')} " in msg and all(
                n in msg for n in owned), (key, msg)
            for name in owned:
                builds = RunConfig(**{field: name, "union_base": "subtrunc"})
                assert ignored_reason(key, builds) is None, (field, name, key)
            checked += 1
    assert checked >= 30


# option -> (a configuration where its part is off, words of the reason, one where it is on)
SWITCHED = {
    "appeal_def": (dict(appeal="off"), "appeal protocol", dict(appeal="on")),
    "requirement": (dict(appeal="off"), "appeal protocol", dict(appeal="off", algorithm="maxfl")),
    "rho_steps": (dict(appeal="off"), "solo models", dict(algorithm="maxfl")),
    "solo_lr": (dict(algorithm="maxfl", requirement="0.5", appeal="off"), "solo models",
                dict(appeal="on")),
    "imbalance_nmax": ({}, "imbalanced pool", dict(imbalance_ratios="1.0")),
    "alpha": (dict(imbalance_ratios="1.0"), "Dirichlet concentration", {}),
    "flip_ratio": ({}, "label flipping", dict(label_flip_fraction=0.3)),
    "byzantine_noise": (dict(algorithm="fedbuff", byzantine_fraction=0.1), "Byzantine clients",
                        dict(byzantine_fraction=0.1)),
    "subtrunc_b": (dict(selector="unionfl"), "--union-base subtrunc",
                   dict(selector="unionfl", union_base="subtrunc")),
    "local_steps_min": ({}, "--local-steps-dist uniform|lognormal",
                        dict(local_steps_dist="uniform")),
    "local_epochs": (dict(local_steps_dist="uniform"), "--local-steps-dist epochs",
                     dict(local_steps_dist="epochs")),
    "steps_sigma": ({}, "lognormal", dict(local_steps_dist="lognormal")),
    "avail_p": (dict(availability="markov"), "--availability bernoulli",
                dict(availability="bernoulli")),
    "avail_off_on": ({}, "--availability markov", dict(availability="markov")),
    "step_time_sigma": ({}, "--deadline and fedbuff", dict(algorithm="fedbuff")),
    "client_momentum": ({}, "--client-opt momentum or nesterov or adam",
                        dict(client_opt="nesterov")),
    "client_beta2": (dict(client_opt="momentum"), "--client-opt adam", dict(client_opt="adam")),
    "client_eps": (dict(client_opt="nesterov"), "--client-opt adam", dict(client_opt="adam")),
}


@pytest.mark.parametrize("key", sorted(SWITCHED))
def test_switched_options_are_refused_by_their_declarations(key):
    """An option of a part that a condition switches on (the appeal protocol, solo models,
    the imbalanced pool, label flipping, Byzantine clients, SubTrunc under UnionFL, the
    local-steps distributions, the availability models, the simulated step times of the
    deadline and fedbuff, the client optimizer's hyperparameters) is refused with that
    part's reason in a configuration where the part is off, and taken where it is on."""
    off, words, on = SWITCHED[key]
    with pytest.raises(ConfigError, match=f"--{key.replace('_', '-')} has no effect here: .*"
                                          f"{re.escape(words)}"):
        check_ignored(RunConfig(**off), {key})
    check_ignored(RunConfig(**on), {key})
