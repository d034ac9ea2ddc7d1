"""End to end: `fedjax-appeal run` of every baseline algorithm on a tiny synthetic federation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedjax_appeal.cli.commands import main

BASELINES = ["qffl", "afl", "scaffold", "mwfed", "perfedavg", "pfedme"]


CLI_TINY = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "3", "--cohort",
            "2", "--rounds", "2", "--local-steps", "2", "--batch-size", "4", "--eval-every",
            "1", "--min-samples", "4", "--partition", "natural"]
# short solo models for the algorithms that run the appeal protocol by default (their rule
# reads the requirements); for the others --rho-steps is refused as having no effect
SOLO = {"mwfed": ["--rho-steps", "2"]}


@pytest.mark.slow
@pytest.mark.parametrize("name", BASELINES)
def test_cli_runs(tmp_path, name):
    out = tmp_path / name
    assert main(["run", *CLI_TINY, *SOLO.get(name, []), "--algorithm", name, "--out",
                 str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["algorithm"] == name
    assert np.isfinite(res["history"][-1]["test_acc_unseen"])
