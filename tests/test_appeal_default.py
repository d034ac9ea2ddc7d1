"""`--appeal auto`: the appeal protocol only where the algorithm needs requirements, an appeal
option is given, or a sweep ranks by its metrics; the choice is in the header and results."""

from __future__ import annotations

import json

import pytest

import fedjax_appeal.algorithms  # noqa: F401  (registers the algorithms whose flags appeal_on reads)
from fedjax_appeal.cli import main
from fedjax_appeal.core.config import RunConfig
from fedjax_appeal.protocols.appeal.requirement import appeal_on
from fedjax_appeal.run.schema import check_types


@pytest.mark.parametrize("kw, on", [
    ({}, False),                                   # fedavg: no requirements
    ({"algorithm": "maxfl"}, True), ({"algorithm": "incfl"}, True),
    ({"algorithm": "mwfed"}, True), ({"algorithm": "qffl"}, False),
    ({"opt_out_after": 5}, True), ({"appeal_def": "train-vs-solo-train"}, True),
    ({"finetune_steps": 3}, True), ({"requirement": "0.5"}, True),
    ({"appeal": "on"}, True), ({"algorithm": "maxfl", "appeal": "off"}, False),
    ({"appeal": True}, True), ({"appeal": False}, False),  # Python callers' booleans
])
def test_auto_rule(kw, on):
    assert appeal_on(RunConfig(**kw)) is on


def test_config_file_booleans_map_to_on_off():
    assert check_types({"appeal": False})["appeal"] == "off"
    assert check_types({"appeal": True})["appeal"] == "on"


TINY = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "2", "--cohort", "3",
        "--rounds", "2", "--local-steps", "2", "--batch-size", "8", "--eval-every", "2",
        "--min-samples", "4", "--partition", "natural"]
SOLO = ["--rho-steps", "2"]  # short solo models, where the appeal protocol is on


def test_plain_fedavg_runs_without_the_protocol_and_says_so(tmp_path, capsys):
    out = tmp_path / "a"
    assert main(["run", *TINY, "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["appeal_protocol"]["on"] is False
    assert not any(k.startswith("gm_appeal") for k in res["history"][-1])
    assert "appeal protocol off (auto" in capsys.readouterr().err
    out = tmp_path / "b"
    assert main(["run", *TINY, *SOLO, "--algorithm", "maxfl", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["appeal_protocol"] == {"on": True,
                                      "why": "appeal protocol on (auto: maxfl uses requirements)"}
    assert 0.0 <= res["history"][-1]["gm_appeal_seen"] <= 1.0
    assert "appeal protocol on (auto: maxfl" in capsys.readouterr().err


def test_sweep_ranked_by_an_appeal_metric_turns_it_on(tmp_path):
    out = tmp_path / "s"
    assert main(["sweep", *TINY, *SOLO, "--grid", "client_lr=0.1,0.05", "--metric",
                 "gm_appeal_seen", "--out", str(out)]) == 0
    res = json.loads((out / "sweep.json").read_text())
    assert res["appeal_protocol"]["on"] is True
    assert all("gm_appeal_seen" in r["final"] for r in res["rows"])
