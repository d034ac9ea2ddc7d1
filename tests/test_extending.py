"""docs/extending.md: its worked plugin (weight rule with its own tunable, selector, algorithm,
dataset) runs through run, sweep, `list` and `--help`; plugins from a config file; a broken
plugin is one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedjax_appeal.cli import main
from fedjax_appeal.core.registry import registrations

DOC = Path(__file__).resolve().parent.parent / "docs" / "extending.md"


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """The guide's plugin as a file; the names it registers are removed afterwards, so that
    later tests (e.g. the golden check over every registered algorithm) see only built-ins."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1
    path = tmp_path_factory.mktemp("plugin") / "my_fl.py"
    path.write_text(blocks[0])
    with registrations():
        yield path


RUN = ["--dataset", "blobs", "--partition", "natural", "--model", "logistic", "--clients", "12",
       "--unseen-clients", "0", "--cohort", "4", "--rounds", "6", "--local-steps", "3",
       "--batch-size", "8", "--eval-every", "3", "--min-samples", "4", "--no-appeal"]


def test_the_guide_plugin_runs_end_to_end(plugin, tmp_path):
    out = tmp_path / "r"
    assert main(["run", "--plugin", str(plugin), *RUN, "--algorithm", "fedavg-localmom",
                 "--aggregation", "loss-weighted", "--selector", "round-robin",
                 "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["algorithm"] == "fedavg-localmom"
    assert res["data"]["train_samples"] + res["data"]["test_samples"] == 12 * 40
    cohorts = np.asarray(res["round_metrics"]["cohort_idx"])
    want = [(r * 4 + np.arange(4)) % 12 for r in range(6)]  # round robin by hand
    np.testing.assert_array_equal(cohorts, want)
    w = np.asarray(res["round_metrics"]["cohort_weights"])
    np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-5)
    assert np.ptp(w, axis=1).min() > 0  # loss-weighted, not uniform
    assert res["history"][-1]["test_acc_seen"] > 0.5  # the blobs are separable: it learns
    # the selector's own static option: stride 5 picks r*4 + 5i (mod 12)
    assert res["config"]["rr_stride"] == 1
    out5 = tmp_path / "r5"
    assert main(["run", "--plugin", str(plugin), *RUN, "--algorithm", "fedavg-localmom",
                 "--aggregation", "loss-weighted", "--selector", "round-robin",
                 "--rr-stride", "5", "--out", str(out5)]) == 0
    res5 = json.loads((out5 / "results.json").read_text())
    assert res5["config"]["rr_stride"] == 5
    np.testing.assert_array_equal(np.asarray(res5["round_metrics"]["cohort_idx"]),
                                  [(r * 4 + 5 * np.arange(4)) % 12 for r in range(6)])


def test_the_guide_algorithm_is_named_once_and_refused_option_by_option(plugin, tmp_path,
                                                                         capsys):
    """The guide's algorithm (two static options and a tunable, all declared with `option`)
    names itself once; each option is refused for another algorithm like a built-in one,
    and taken, recorded and given to the builder for its own."""
    from fedjax_appeal.algorithms.base import options_for
    from fedjax_appeal.core.config import RunConfig
    from fedjax_appeal.run.validate import ignored_reason, used_hparams

    assert plugin.read_text().count('"fedavg-localmom"') == 1
    for flags in (["--local-momentum", "0.5"], ["--local-nesterov"],
                  ["--local-accumulate", "2"]):
        out = tmp_path / flags[0][2:]
        assert main(["run", "--plugin", str(plugin), *RUN, *flags, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.endswith(
            f"{flags[0]} has no effect here: it configures --algorithm fedavg-localmom; drop it "
            "or change the combination")
        assert not out.exists()
    mine = RunConfig(algorithm="fedavg-localmom", local_nesterov=True, local_accumulate=2)
    assert all(ignored_reason(k, mine) is None
               for k in ("local_momentum", "local_nesterov", "local_accumulate"))
    assert "local_momentum" in used_hparams(mine) and "local_momentum" not in used_hparams(
        RunConfig())
    opts = options_for("fedavg-localmom", mine)
    assert (opts.local_nesterov, opts.local_accumulate) == (True, 2)
    # the guide's weight-rule tunable is refused like a built-in one
    assert ignored_reason("loss_temp", RunConfig()) == "it configures --aggregation loss-weighted"


def test_the_guide_option_is_refused_without_its_selector(plugin, tmp_path, capsys):
    assert main(["run", "--plugin", str(plugin), *RUN, "--rr-stride", "2",
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--rr-stride has no effect here" in err
    assert "it configures --selector round-robin" in err
    assert not (tmp_path / "r").exists()


def test_plugin_names_reach_list_help_and_validation(plugin, capsys, tmp_path):
    assert main(["list", "--plugin", str(plugin)]) == 0
    listing = capsys.readouterr().out
    for name in ("fedavg-localmom", "blobs", "round-robin", "loss-weighted"):
        assert name in listing
    assert "experiments:" in listing and "selection-compare" in listing
    with pytest.raises(SystemExit):
        main(["run", "--plugin", str(plugin), "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert "round-robin" in helptext and "one of: auto" in helptext  # --model choices
    # without the plugin (a fresh process: registrations last for the process) the name is
    # refused before anything runs
    r = subprocess.run([sys.executable, "-m", "fedjax_appeal", "run", *RUN, "--selector",
                        "round-robin", "--out", str(tmp_path / "r")], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "unknown dataset 'blobs'" in r.stderr
    assert not (tmp_path / "r").exists()


def test_plugin_from_a_config_file_and_in_a_sweep(plugin, tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'plugin = ["{plugin}"]\naggregation = "loss-weighted"\nloss_temp = 2.5\n')
    out = tmp_path / "sw"
    assert main(["sweep", "--config", str(cfg), *RUN, "--grid", "loss_temp=0.2,5",
                 "--seeds", "0,1", "--out", str(out)]) == 0
    res = json.loads((out / "sweep.json").read_text())
    assert len(res["rows"]) == 4 and res["timing"]["groups"][0]["batches"] == 1  # one vmap
    assert sorted(r["hparams"]["loss_temp"] for r in res["rows"]) == [0.2, 0.2, 5, 5]
    assert res["hparams"]["loss_temp"] == 2.5  # the config file's value (the grid's win)
    # the guide's tunable acts: the two temperatures train differently
    final = {r["hparams"]["loss_temp"]: r["final"]["train_loss"] for r in res["rows"]
             if r["seed"] == 0}
    assert final[0.2] != final[5]


@pytest.mark.parametrize("name, msg", [("no_such_plugin_module", "importing it failed"),
                                       ("missing.py", "no such file")])
def test_broken_plugin_is_one_line(tmp_path, capsys, name, msg):
    assert main(["run", "--plugin", str(tmp_path / name) if name.endswith(".py") else name,
                 *RUN, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()
