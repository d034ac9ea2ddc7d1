"""Component options (`core.fields.option`): a static option of any type, declared beside the
component that reads it, by the built-in components and by plugins alike; a run and a sweep
take it like any other key, and a run where its `applies` fails refuses it in one line."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.cli import main
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig, field_names
from fedjax_appeal.core.fields import OPTIONS, mentioning
from fedjax_appeal.extend import SELECTORS, Selector, component, option, registrations, when
from fedjax_appeal.run.experiment import run_config
from fedjax_appeal.run.sweep import sweep
from fedjax_appeal.run.validate import check_ignored, ignored_reason, validate

N = 6


def _rotating(model, opts):
    """Clients offset, offset + 1, ... (mod N), or the reverse order with 'down'."""
    def select(key, state, data, hp):
        i = (opts.test_offset + jnp.arange(opts.cohort)) % data.num_clients
        return (i[::-1] if opts.test_order == "down" else i).astype(jnp.int32), \
            jnp.ones((opts.cohort,), bool)

    return Selector(init=lambda key, state, data, hp: {}, select=select)


@pytest.fixture
def plugin():
    with registrations():
        rotate = component("selector", "test-rotate")
        names = (option("test_offset", 1, "first client of the rotating selector",
                        applies=rotate, group="selection", ge=0),
                 option("test_order", "up", "order of the rotating selector's cohort",
                        ("up", "down"), applies=rotate, group="selection"))
        SELECTORS["test-rotate"] = _rotating
        yield names


CFG = RunConfig(algorithm="fedavg", dataset="synthetic", partition="natural", clients=N,
                unseen_clients=0, cohort=3, rounds=2, local_steps=2, batch_size=4,
                eval_every=1, min_samples=4, appeal="off", selector="test-rotate")
TINY = ["--dataset", "synthetic", "--partition", "natural", "--clients", str(N),
        "--unseen-clients", "0", "--cohort", "3", "--rounds", "2", "--local-steps", "2",
        "--batch-size", "4", "--eval-every", "1", "--min-samples", "4", "--appeal", "off",
        "--selector", "test-rotate"]


def test_builtin_options_are_declared_in_their_components():
    assert mentioning("algorithm", "pfedme") == ("pfedme_k",)
    assert mentioning("algorithm", "perfedavg") == ("perfedavg_variant",)
    assert set(mentioning("selector")) >= {"poc_d", "union_window", "union_base",
                                           "subtrunc_phi"}
    assert "subtrunc_phi" in mentioning("selector", "subtrunc")
    assert "subtrunc_phi" not in mentioning("selector", "divfl")
    assert mentioning("selector", "poc") == ("poc_d",)
    assert mentioning("partition", "dirichlet") == ("alpha",)
    assert set(mentioning("dp", "fixed")) == {"dp_sampling", "dp_delta",
                                              "dp_publish_client_stats"}
    assert mentioning("compress", "topk") == ("compress_fraction", "compress_feedback")
    from fedjax_appeal.data import data_fields
    assert {"alpha", "num_clusters", "classes_per_client"} <= set(data_fields())
    assert "dp_delta" not in data_fields()
    cfg = RunConfig(pfedme_k=3)
    assert cfg.pfedme_k == 3 and RunConfig().pfedme_k == 5
    assert cfg == RunConfig().replace(pfedme_k=3) and RunConfig(pfedme_k=5) == RunConfig()
    assert cfg.as_dict()["pfedme_k"] == 3 and "component_options" not in cfg.as_dict()
    assert RunConfig(cohort=4, pfedme_k=3).replace(cohort=10) == cfg  # back to the default
    assert hash(cfg) == hash(RunConfig(pfedme_k=3))
    with pytest.raises(TypeError, match="pfedmek"):
        RunConfig(pfedmek=3)


def test_a_plugin_option_reaches_its_component(plugin, tmp_path):
    assert set(plugin) <= set(field_names(RunConfig))
    cfg = CFG.replace(test_offset=4, test_order="down")
    validate(cfg, HParams())
    out = tmp_path / "run"
    assert main(["run", *TINY, "--test-offset", "4", "--test-order", "down", "--out",
                 str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["test_offset"] == 4 and res["config"]["test_order"] == "down"
    _, raw = run_config(cfg.replace(out=str(tmp_path / "lib")), HParams())
    cohorts = np.asarray(raw.round_metrics["cohort_idx"])
    assert cohorts.tolist() == [[0, 5, 4]] * 2  # 4, 5, 0 reversed, every round


def test_a_config_file_and_a_grid_take_a_plugin_option(plugin, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"test_offset": 2}))
    out = tmp_path / "run"
    assert main(["run", *TINY, "--config", str(path), "--out", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["config"]["test_offset"] == 2
    res = sweep(CFG, {"test_offset": [0, 3]}, [0])
    assert sorted(r["static"]["test_offset"] for r in res.rows) == [0, 3]
    assert res.rows[0]["final"]["train_loss"] != res.rows[1]["final"]["train_loss"]
    for r in res.rows:  # each group ran its own cohorts
        one, _ = run_config(CFG.replace(test_offset=r["static"]["test_offset"],
                                        out=str(tmp_path / f"o{r['static']['test_offset']}")),
                            HParams())
        assert r["final"]["train_loss"] == pytest.approx(one["history"][-1]["train_loss"],
                                                         rel=1e-5)


def test_a_plugin_option_is_refused_in_one_line(plugin, tmp_path, capsys):
    assert ignored_reason("test_offset", CFG.replace(selector="random")) == (
        "it configures --selector test-rotate")
    assert ignored_reason("test_offset", CFG) is None
    rc = main(["run", *TINY[:-2], "--test-offset", "2", "--out", str(tmp_path / "a")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "--test-offset" in err and "test-rotate" in err
    with pytest.raises(ConfigError, match="--test-order must be one of: up, down"):
        validate(CFG.replace(test_order="sideways"), HParams())
    with pytest.raises(ConfigError, match="--test-offset must be an integer"):
        validate(CFG.replace(test_offset="2"), HParams())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"test_offset": 1.5}))
    assert main(["run", *TINY, "--config", str(bad), "--out", str(tmp_path / "b")]) == 2
    assert "test_offset" in capsys.readouterr().err


def test_option_refuses_a_taken_name_or_type():
    with pytest.raises(ConfigError, match="already a configuration key"):
        option("cohort", 1, "x", applies=component("selector", "random"))
    with pytest.raises(ConfigError, match="bool, int, float or str"):
        option("test_list", [1], "x", applies=component("selector", "random"))
    with pytest.raises(ConfigError, match="must be a Python identifier"):
        option("test names", 1, "x")
    with pytest.raises(ConfigError, match="group must be one of"):
        option("test_names", 1, "x", group="nowhere")
    assert "test_names" not in OPTIONS


def test_a_switched_option_is_refused_while_its_part_is_off(tmp_path, capsys):
    """An option whose `applies` is a condition (a plugin's, like the built-in label
    flipping's `flip_ratio`) is refused in one line, with its reason, by a run in which the
    condition is off, and taken where it is on."""
    base = CFG.replace(selector="random")
    with registrations():
        name = option("test_flip_extra", 2, "x", applies=when(
            lambda cfg: cfg.label_flip_fraction > 0, "it needs flipped clients"), ge=0)
        assert ignored_reason(name, base) == "it needs flipped clients"
        assert ignored_reason(name, base.replace(label_flip_fraction=0.5)) is None
        with pytest.raises(ConfigError, match="^--test-flip-extra has no effect here: it "
                                              "needs flipped clients; drop it"):
            check_ignored(base.replace(test_flip_extra=3), {name})
        check_ignored(base.replace(test_flip_extra=3, label_flip_fraction=0.5), {name})
        # the built-in switched options, declared beside their parts
        assert "label flipping" in ignored_reason("flip_ratio", base)
        assert ignored_reason("flip_ratio", base.replace(label_flip_fraction=0.2)) is None
        assert "imbalanced pool" in ignored_reason("imbalance_major", base)
        assert ignored_reason("imbalance_major", base.replace(imbalance_ratios="1.0")) is None
        assert "solo models" in ignored_reason("rho_steps", base.replace(appeal="off"))
        assert ignored_reason("rho_steps", base.replace(appeal="on")) is None
    assert name not in OPTIONS and not hasattr(RunConfig(), name)  # undone with the block


def test_the_local_sgd_unroll_is_declared_with_fedavg_and_read_by_plugins_built_on_it():
    """`local_unroll` is declared once, beside FedAvg's local SGD, as an option of that part:
    it applies to the algorithms built on it (those whose `Supports.parts` list
    "sgd_local"); a plugin algorithm that lists the part takes it, one that does not
    refuses it."""
    from fedjax_appeal.algorithms.base import ALGORITHMS
    from fedjax_appeal.algorithms.fedavg import fedavg
    from fedjax_appeal.core.capabilities import SUPPORTS, Supports
    from fedjax_appeal.extend import register

    built_on = sorted(n for n in ALGORITHMS if "sgd_local" in SUPPORTS[n].parts)
    assert built_on == ["afl", "fedavg", "fednova", "fedprox", "incfl", "maxfl", "mwfed",
                        "qffl"]
    assert not OPTIONS["local_unroll"].tunable
    assert "local_unroll" in mentioning("part", "sgd_local")
    assert ignored_reason("local_unroll", RunConfig(algorithm="scaffold")) == (
        "it configures --algorithm " + " or ".join(built_on))
    for parts, refused in (((), True), (("sgd_local",), False)):
        with registrations():
            register("test-sgd", Supports(parts=parts))(fedavg)
            reason = ignored_reason("local_unroll", RunConfig(algorithm="test-sgd"))
            assert (reason is not None) is refused, reason


def test_an_option_overridden_by_another_part_says_so(plugin):
    """An option that another part of the run replaces says so in its own `applies` (the
    imbalanced pool over the Dirichlet alpha, UnionFL on DivFL over SubTrunc's options),
    combined with `&`, like a plugin's own condition."""
    assert ignored_reason("alpha", RunConfig(imbalance_ratios="1.0")).startswith(
        "it is the Dirichlet concentration")
    assert ignored_reason("alpha", RunConfig()) is None
    assert "subtrunc" in ignored_reason("subtrunc_b", RunConfig(selector="unionfl",
                                                                union_base="divfl"))
    assert ignored_reason("subtrunc_b", RunConfig(selector="unionfl",
                                                  union_base="subtrunc")) is None
    rotate = component("selector", "test-rotate")
    option("test_order", "up", "order of the rotating selector's cohort", ("up", "down"),
           applies=rotate & when(lambda cfg: cfg.cohort > 2,
                                 "the rotation's order needs a cohort above 2"),
           group="selection")
    assert ignored_reason("test_order", CFG.replace(cohort=2)) == (
        "the rotation's order needs a cohort above 2")
    assert ignored_reason("test_order", CFG) is None
    assert ignored_reason("test_order", CFG.replace(selector="random")) == (
        "it configures --selector test-rotate")
