"""One declaration per option (`core.fields.option`): the records take what is declared and
forget what a `registrations()` block undoes; `applies` alone decides refusals, `--help` and
the recorded hyperparameters; a plugin's options are refused exactly like built-in ones."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest

from fedjax_appeal.cli.commands import main
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig, field_names
from fedjax_appeal.core.fields import OPTIONS
from fedjax_appeal.extend import (
    Supports,
    algorithm,
    component,
    option,
    options_for,
    register,
    registrations,
    when,
)
from fedjax_appeal.run.validate import check_ignored, ignored_reason, used_hparams


def _help(argv: list[str]) -> str:
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        main(argv)
    return out.getvalue()


def test_run_help_of_a_default_run_fits_in_200_lines(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    default, every = _help(["run", "--help"]), _help(["run", "--help-all"])
    assert len(default.splitlines()) <= 200 < len(every.splitlines())
    assert "--conv-impl" not in default and "--conv-impl" in every  # the MLP has no conv
    assert "--conv-impl" in _help(["run", "--dataset", "cifar10", "--help"])


def test_a_plugin_algorithm_with_two_static_options_and_a_tunable():
    """Named once, declared with `option` only: each option is refused for another
    algorithm with the same words as a built-in one's, taken for its own, recorded only
    there, and found by its builder; the records forget it after the block."""
    with registrations():
        mine = algorithm("test-mine")
        option("mine_steps", 2, "inner steps", applies=mine, ge=1)
        option("mine_form", "a", "variant", ("a", "b"), applies=mine)
        option("mine_temp", 1.0, "temperature", applies=mine, tunable=True, gt=0)

        @register(mine, Supports(parts=("sgd_local",)))
        def build(model, opts, executor=None):
            raise NotImplementedError

        other = RunConfig(algorithm="fedavg")
        for key in ("mine_steps", "mine_form", "mine_temp"):
            with pytest.raises(ConfigError, match=f"^--{key.replace('_', '-')} has no effect here: "
                                                "it configures --algorithm test-mine; drop it"):
                check_ignored(other, {key})
        with pytest.raises(ConfigError, match="--pfedme-k has no effect here: it configures "
                                            "--algorithm pfedme; drop it"):
            check_ignored(other, {"pfedme_k"})  # a built-in's, in the same words
        cfg = RunConfig(algorithm="test-mine", mine_steps=3, mine_form="b")
        check_ignored(cfg, {"mine_steps", "mine_form", "mine_temp", "local_unroll"})
        assert "mine_temp" in used_hparams(cfg) and "mine_temp" not in used_hparams(other)
        opts = options_for("test-mine", cfg)
        assert (opts.mine_steps, opts.mine_form, opts.local_unroll) == (3, "b", 1)
        assert HParams(mine_temp=0.5).mine_temp == 0.5 and HParams().mine_temp == 1.0
    assert "mine_steps" not in field_names(RunConfig) and "mine_temp" not in OPTIONS
    assert not hasattr(RunConfig(), "mine_steps") and not hasattr(HParams(), "mine_temp")


def test_applies_combines_conditions_and_their_reasons():
    """`&` gives the reason of the first condition that fails; `|` holds where either does
    (the reason of the first); `because` names another reason."""
    big = when(lambda cfg: cfg.cohort > 5, "it needs a cohort above 5")
    poc = component("selector", "poc")
    both, either = big & poc, (big | poc).because("it needs one of them")
    assert both.why(RunConfig(cohort=10, selector="poc")) is None
    assert both.why(RunConfig(cohort=2, selector="poc")) == "it needs a cohort above 5"
    assert both.why(RunConfig(cohort=10)) == "it configures --selector poc"
    assert either.why(RunConfig(cohort=2, selector="poc")) is None
    assert either.why(RunConfig(cohort=2)) == "it needs one of them"
    assert both.mentions == {("selector", "poc")} and both.names("selector") == ("poc",)


def test_a_plugin_tunable_of_a_weight_rule_is_refused_like_a_builtin_one():
    """The guide's `loss_temp` used to pass silently with another weight rule; declared
    for its rule, it is refused like `exp_alpha`."""
    with registrations():
        option("test_loss_temp", 1.0, "temperature of a rule", tunable=True,
               applies=component("aggregation", "test-loss-weighted"))
        assert ignored_reason("test_loss_temp", RunConfig()) == (
            "it configures --aggregation test-loss-weighted")
        assert ignored_reason("exp_alpha", RunConfig()) == (
            "it configures --aggregation exp-alpha or exp-alpha-n")
        assert "test_loss_temp" not in used_hparams(RunConfig())


def test_a_plugin_selector_reading_an_option_not_declared_for_it_is_refused_when_built():
    """The build check (before any data load) names the selector and the declaration to
    add; declared for the selector, the option is read."""
    import jax.numpy as jnp

    from fedjax_appeal.extend import SELECTORS, Selector
    from fedjax_appeal.run.validate import validate

    def probe(model, opts):
        window = opts.test_probe_window  # read when built, as a builder should
        return Selector(init=lambda key, state, data, hp: {},
                        select=lambda key, state, data, hp: (
                            jnp.arange(opts.cohort) + 0 * window, jnp.ones(opts.cohort, bool)))

    with registrations():
        SELECTORS["test-probe"] = probe
        option("test_probe_window", 3, "a window", applies=algorithm("fedprox"))
        cfg = RunConfig(selector="test-probe", dataset="synthetic", clients=6,
                        unseen_clients=0, cohort=2)
        with pytest.raises(ConfigError) as e:
            validate(cfg, HParams())
        assert str(e.value) == (
            "--selector test-probe reads the option 'test_probe_window', which is not declared "
            "for it: declare an option of its own: option(NAME, DEFAULT, HELP, "
            "applies=component('selector', 'test-probe'))")
        option("test_probe_window", 3, "a window", applies=component("selector", "test-probe"))
        validate(cfg, HParams())
