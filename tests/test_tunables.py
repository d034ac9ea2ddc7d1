"""User tunables (`extend.option(..., tunable=True)`): a plugin's hyperparameter lives in
`HParams.extra`, a vmapped sweep batches it, and run / sweep / config files / `--hp` accept
it like a built-in field; an unknown name is one line."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.cli import main
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.parts import WeightRule
from fedjax_appeal.extend import AGGREGATIONS, masked_softmax, option, registrations
from fedjax_appeal.run.experiment import run_config
from fedjax_appeal.run.sweep import sweep
from fedjax_appeal.run.validate import validate

TEMP = "test_temp"


def _softmax_rule(upd, idx, valid, state, hp):
    """Weights softmax(loss_before / T) over the cohort, T = the plugin's tunable."""
    return masked_softmax(upd.loss_before / hp.get(TEMP), valid)


@pytest.fixture
def plugin():
    """Register the tunable and a weight rule reading it; removed afterwards."""
    with registrations():
        option(TEMP, 1.0, "temperature of the test softmax rule", tunable=True)
        AGGREGATIONS["temp-softmax"] = WeightRule(_softmax_rule,
                                                  needs=frozenset({"loss_before"}))
        yield


CFG = RunConfig(algorithm="fedavg", dataset="synthetic", partition="natural", clients=6,
                unseen_clients=0, cohort=3, rounds=2, local_steps=2, batch_size=4,
                eval_every=1, min_samples=4, appeal="off", aggregation="temp-softmax")
TINY = ["--dataset", "synthetic", "--partition", "natural", "--clients", "6",
        "--unseen-clients", "0", "--cohort", "3", "--rounds", "2", "--local-steps", "2",
        "--batch-size", "4", "--eval-every", "1", "--min-samples", "4", "--appeal", "off",
        "--aggregation", "temp-softmax"]


def test_hparams_extra_is_a_vmapped_pytree_leaf(plugin):
    hp = HParams.make(client_lr=0.1, **{TEMP: 2.0})
    assert hp.get(TEMP) == 2.0 and hp.extra[TEMP] == 2.0 and hp.client_lr == 0.1
    assert HParams().get(TEMP) == 1.0  # the registered default
    assert HParams().to_dict()[TEMP] == 1.0 and hp.to_dict()[TEMP] == 2.0
    assert hp.with_values(**{TEMP: 3.0}).get(TEMP) == 3.0
    # a stack of three HParams is vmapped over the tunable: each slot = its own softmax
    temps = [0.25, 1.0, 4.0]
    stacked = jax.tree.map(lambda *x: jnp.stack(x),
                           *[HParams.make(**{TEMP: t}).as_arrays() for t in temps])
    loss = jnp.array([0.5, 2.0, 1.0])
    valid = jnp.array([True, True, False])

    class Upd:
        loss_before = loss

    w = jax.vmap(lambda h: _softmax_rule(Upd, None, valid, None, h))(stacked)
    for t, row in zip(temps, np.asarray(w), strict=True):
        e = np.exp(np.array([0.5, 2.0]) / t)
        np.testing.assert_allclose(row, [*(e / e.sum()), 0.0], rtol=1e-5)


def test_unknown_tunable_is_one_line(plugin, tmp_path, capsys):
    with pytest.raises(ConfigError, match=f"unknown hyperparameter 'tmep'.*{TEMP}"):
        HParams.make(tmep=1.0)
    with pytest.raises(ConfigError, match="tunables registered by plugins: " + TEMP):
        validate(CFG, HParams(extra={"tmep": 1.0}))
    with pytest.raises(ConfigError, match="unknown hyperparameter 'nope'"):
        HParams().get("nope")
    for bad, msg in ((["--hp", "tmep=2"], f"tunables registered by plugins: {TEMP}"),
                     (["--hp", f"{TEMP}=abc"], "is not a number"),
                     (["--hp", TEMP], "write NAME=VALUE")):
        assert main(["run", *TINY, *bad, "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1 and err.startswith("fedjax-appeal: error:")
    cfg = tmp_path / "bad.toml"
    cfg.write_text("tmep = 2.0\n")
    assert main(["run", *TINY, "--config", str(cfg), "--out", str(tmp_path / "r")]) == 2
    assert "unknown key 'tmep'" in capsys.readouterr().err
    assert main(["sweep", *TINY, "--grid", "tmep=1,2", "--out", str(tmp_path / "r")]) == 2
    assert f"registered tunable ({TEMP})" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="already a configuration key"):
        option("qffl_q", 0.1, "x", tunable=True)  # a built-in component's tunable
    assert not (tmp_path / "r").exists()
    with pytest.raises(ConfigError, match="already a configuration key"):
        option("client_lr", 0.1, "x", tunable=True)
    with pytest.raises(ConfigError, match="finite number"):
        option("other_temp", float("nan"), "x", tunable=True)


@pytest.mark.slow
def test_sweep_over_a_tunable_equals_runs_one_by_one(plugin):
    temps = [0.05, 1.0, 20.0]
    res = sweep(CFG, {TEMP: temps}, [0], max_parallel=3)  # one vmapped batch of 3
    assert len(res.rows) == 3 and res.timing["groups"][0]["batches"] == 1
    finals = []
    for row, t in zip(res.rows, temps, strict=True):
        assert row["hparams"] == {TEMP: t}
        ref, _ = run_config(CFG, HParams.make(**{TEMP: t}))
        assert ref["hparams"][TEMP] == t
        assert [h["round"] for h in row["history"]] == [h["round"] for h in ref["history"]]
        for a, b in zip(row["history"], ref["history"], strict=True):
            for k in ("train_loss", "test_acc_seen", "test_loss_seen", "train_loss_clients"):
                np.testing.assert_allclose(a[k], b[k], rtol=2e-4, atol=2e-5)
        w = np.asarray(ref["round_metrics"]["cohort_weights"])
        finals.append((row["final"]["train_loss"], np.ptp(w, axis=1).mean()))
    # the tunable acts: a low temperature concentrates the weights, a high one evens them
    assert finals[0][1] > finals[1][1] > finals[2][1]
    assert len({f[0] for f in finals}) == 3


@pytest.mark.slow
def test_cli_hp_flag_config_file_and_results_round_trip(plugin, tmp_path, capsys):
    from fedjax_appeal.cli.commands import make_parser, resolve

    # --hp NAME=X, the generated --NAME flag and a config file key give the same HParams
    (tmp_path / "c.toml").write_text(f"{TEMP} = 0.3\nclient_lr = 0.07\n")
    hps = [resolve(make_parser().parse_args(["run", *TINY, *extra]))[1]
           for extra in (["--hp", f"{TEMP}=0.3", "--hp", "client-lr=0.07"],
                         ["--test-temp", "0.3", "--client-lr", "0.07"],
                         ["--config", str(tmp_path / "c.toml")])]
    for hp in hps:
        assert hp.extra == {TEMP: 0.3} and hp.client_lr == 0.07
    # a flag overrides the config file
    hp = resolve(make_parser().parse_args(["run", *TINY, "--config", str(tmp_path / "c.toml"),
                                           "--hp", f"{TEMP}=0.5"]))[1]
    assert hp.get(TEMP) == 0.5
    outs = {}
    for name, extra in (("hp", ["--hp", f"{TEMP}=0.3", "--client-lr", "0.07"]),
                        ("file", ["--config", str(tmp_path / "c.toml")])):
        out = tmp_path / name
        assert main(["run", *TINY, *extra, "--out", str(out)]) == 0
        outs[name] = json.loads((out / "results.json").read_text())
        assert outs[name]["hparams"][TEMP] == pytest.approx(0.3)
        assert outs[name]["hparams"]["client_lr"] == pytest.approx(0.07)
    assert outs["file"]["history"] == outs["hp"]["history"]
    # results.json's hparams (the ones the run uses) rebuild the run's HParams on them
    rebuilt = HParams.make(**outs["hp"]["hparams"]).to_dict()
    assert {k: rebuilt[k] for k in outs["hp"]["hparams"]} == pytest.approx(
        outs["hp"]["hparams"])
    # --help and list show the tunable
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "--test-temp" in capsys.readouterr().out
    assert main(["list"]) == 0
    assert f"{TEMP} (default 1)" in capsys.readouterr().out
