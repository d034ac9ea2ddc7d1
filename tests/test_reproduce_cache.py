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


TINY_TABLE = dict(dataset="synthetic", partition="natural", clients=6, unseen_clients=2,
                  cohort=2, rounds=4, eval_every=2, local_steps=2, batch_size=4,
                  min_samples=4, rho_steps=2, opt_out_after=0, finetune_steps=0)


def _without_cost(folder: Path) -> tuple[str, dict]:
    """(table.md without its Cost section, results.json without cost and run timings: what
    differs between two computations of the same runs is only how long they took)."""
    import json

    md = (folder / "table.md").read_text().split("## Cost")[0]

    def drop(obj):
        if isinstance(obj, dict):
            return {k: drop(v) for k, v in obj.items() if k not in ("cost", "timing")}
        if isinstance(obj, list):
            return [drop(v) for v in obj]
        return obj

    return md, drop(json.loads((folder / "results.json").read_text()))


@pytest.mark.slow
def test_an_interrupted_reproduce_rerun_writes_the_uninterrupted_report(tmp_path, monkeypatch):
    """`reproduce NAME` stopped by Ctrl-C in its third run and started again serves the two
    finished runs from the run cache and computes the rest: the report is the one of an
    uninterrupted experiment (`--fresh`: every run computed), every number equal."""
    import json

    import fedjax_appeal
    from fedjax_appeal.cli.commands import main
    from papers.appeal.tables import run_and_report
    from papers.spec import Arm, Setting, Table

    table = Table("tiny-appeal", "a tiny appeal table", "Tiny appeal table",
                  settings=(Setting("synthetic", TINY_TABLE, TINY_TABLE),),
                  arms=(Arm("FedAvg", "fedavg"), Arm("MaxFL", "maxfl")),
                  metrics=("gm_appeal_seen", "test_acc_seen"), base_hp={"client_lr": 0.05})
    reproduce.load_modules()
    monkeypatch.setitem(reproduce.EXPERIMENTS, table.name,
                        (lambda ctx: run_and_report(ctx, table), table.help))
    monkeypatch.setitem(reproduce.SEEDS, table.name, (0, 1))

    def command(name: str, *flags: str) -> list[str]:
        return ["reproduce", table.name, "--out", str(tmp_path / name), "--cache-dir",
                str(tmp_path / "cache"), *flags]

    real, calls = fedjax_appeal.run_config, []

    def third_is_interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(fedjax_appeal, "run_config", third_is_interrupted)
    assert main(command("s")) == 130
    assert not (tmp_path / "s").exists()
    assert len(list((tmp_path / "cache" / "runs").glob("*.json"))) == 2
    assert main(command("s")) == 0
    assert len(calls) == 5  # the two finished runs were not computed again
    rec = json.loads((tmp_path / "s" / "results.json").read_text())["cost"]
    assert rec["runs"] == {"computed": 2, "cached": 2}
    assert main(command("ref", "--fresh")) == 0  # every run computed, none interrupted
    assert len(calls) == 9
    assert _without_cost(tmp_path / "s") == _without_cost(tmp_path / "ref")


def test_a_table_counts_the_data_it_loads_as_data(tmp_path, monkeypatch):
    """`run_table` loads each seed's federation outside its runs, once for its shape and
    once (padded) for its arms: both count as data in the report's cost, not as other."""
    import time

    import fedjax_appeal
    from papers.runner import run_table
    from papers.spec import Arm, Setting, Table

    real, loads = fedjax_appeal.load_federated, []

    def slow_load(cfg, *a, **k):
        loads.append(cfg.seed)
        time.sleep(0.25)
        return real(cfg, *a, **k)

    monkeypatch.setattr(fedjax_appeal, "load_federated", slow_load)
    spec = {k: getattr(CFG, k) for k in ("dataset", "partition", "clients", "unseen_clients",
                                         "cohort", "rounds", "local_steps", "batch_size",
                                         "eval_every", "min_samples", "appeal")}
    table = Table("tiny", "a tiny table", "Tiny table", settings=(Setting("s", spec, spec),),
                  arms=(Arm("FedAvg", "fedavg"),), metrics=("test_acc_seen",),
                  base_hp={"client_lr": 0.1})
    ctx = reproduce.Context("t", [0, 1], tmp_path / "out", cache_dir=str(tmp_path / "cache"))
    out = run_table(ctx, table, lambda res, data: {})
    assert [r["seed"] for r in out["s"]["FedAvg"]["runs"]] == [0, 1]
    assert loads == [0, 1, 0, 1]  # the shapes of both seeds, then each seed's runs
    assert ctx.spent.data_s >= 4 * 0.25
    assert ctx.cost()["time"]["data"] == pytest.approx(ctx.spent.data_s)
