"""The run cache of `fedjax-appeal reproduce`: a finished run is served again only for the
same configuration, hyperparameters and code; `--fresh` reruns."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedjax_appeal.core.config import HParams, RunConfig
from papers import reproduce

CFG = RunConfig(dataset="synthetic", partition="natural", clients=6, unseen_clients=0,
                cohort=2, rounds=2, local_steps=1, batch_size=4, eval_every=1, min_samples=4,
                appeal=False)


def _ctx(tmp_path: Path, reuse: bool = True) -> reproduce.Context:
    return reproduce.Context("t", [0], tmp_path / "out", cache_dir=str(tmp_path / "cache"),
                             reuse=reuse)


@pytest.mark.slow
def test_second_run_is_served_from_cache(tmp_path, monkeypatch):
    hp = HParams(client_lr=0.1)
    first, sim = _ctx(tmp_path).run(CFG, hp)
    assert sim is not None
    files = list((tmp_path / "cache" / "runs").glob("*.json"))
    assert len(files) == 1
    again, sim2 = _ctx(tmp_path).run(CFG, hp)
    assert sim2 is None and again["history"] == first["history"]
    # another lr, another seed, --fresh, or changed code: computed anew
    assert _ctx(tmp_path).run(CFG, HParams(client_lr=0.2))[1] is not None
    assert _ctx(tmp_path).run(CFG.replace(seed=1), hp)[1] is not None
    assert _ctx(tmp_path, reuse=False).run(CFG, hp)[1] is not None
    # another experiment with the same configuration shares the finished run
    other = reproduce.Context("u", [0], tmp_path / "out2", cache_dir=str(tmp_path / "cache"))
    assert other.run(CFG, HParams(client_lr=0.2))[1] is None
    monkeypatch.setattr(reproduce, "source_hash", lambda: "other code")
    assert _ctx(tmp_path).run(CFG, hp)[1] is not None
    assert len(list((tmp_path / "cache" / "runs").glob("*.json"))) == 4


def test_run_key_ignores_data_locations():
    hp = HParams()
    assert (reproduce.run_key(CFG, hp)
            == reproduce.run_key(CFG.replace(data_dir="/elsewhere", cache_dir="/c"), hp))
    assert reproduce.run_key(CFG, hp) != reproduce.run_key(CFG.replace(rounds=3), hp)


@pytest.mark.slow
def test_report_records_its_cost(tmp_path):
    """A report's JSON carries a `cost` entry and its markdown ends with a Cost section:
    wall split, runs computed and cached, machine, JAX version, commit."""
    import json

    import jax

    ctx = _ctx(tmp_path)
    first, _ = ctx.run(CFG, HParams(client_lr=0.1))
    again, sim = ctx.run(CFG, HParams(client_lr=0.1))
    assert sim is None
    ctx.write({"table.md": "# t\n", "results.json": {"x": 1}})
    rec = json.loads((tmp_path / "out" / "results.json").read_text())
    cost = rec["cost"]
    assert rec["x"] == 1
    assert cost["runs"] == {"computed": 1, "cached": 1}
    assert cost["jax"] == jax.__version__ and cost["machine"]["cores"] >= 1
    t = cost["time"]
    assert t["train"] == pytest.approx(first["timing"]["train_total_s"])
    named = sum(t[k] for k in ("compile", "train", "eval", "data", "other"))
    assert named == pytest.approx(t["wall"], rel=1e-6) and t["wall"] > t["train"] > 0
    md = (tmp_path / "out" / "table.md").read_text()
    assert md.startswith("# t\n") and "## Cost" in md and cost["commit"] in md
    assert "1 computed, 1 read back" in md
