"""The automatic execution layout (execute/layout.py): the rule, its resolution in a run's
configuration, and the CPU split the command line makes before JAX runs."""

from __future__ import annotations

import jax
import pytest

from fedjax_appeal.cli.commands import cpu_devices_for, make_parser
from fedjax_appeal.core.config import RunConfig
from fedjax_appeal.execute import layout
from fedjax_appeal.execute.layout import choose, cpu_split, largest_divisor, resolve_layout


@pytest.mark.parametrize("n, limit, want", [(10, 2, 2), (10, 16, 10), (100, 16, 10),
                                            (7, 2, 1), (7, 16, 7), (17, 16, 1), (1, 8, 1),
                                            (12, 8, 6), (8, 1, 1), (0, 4, 1)])
def test_largest_divisor_by_hand(n, limit, want):
    assert largest_divisor(n, limit) == want


def test_cpu_split_and_choose_rules():
    assert cpu_split(10, cores=2) == 2 and cpu_split(5, cores=2) == 0  # odd cohort: no split
    assert cpu_split(100, cores=16) == 10 and cpu_split(1, cores=16) == 0
    # CPU: one client at a time per device; an accelerator keeps each share in one vmap
    assert choose(10, backend="cpu", device_count=2, processes=1)[:2] == (2, 1)
    assert choose(10, backend="gpu", device_count=4, processes=1)[:2] == (2, 0)
    assert choose(9, backend="cpu", device_count=2, processes=1)[:2] == (1, 0)
    assert choose(10, backend="cpu", device_count=1, processes=1)[:2] == (1, 0)
    assert choose(10, backend="cpu", device_count=4, processes=2)[:2] == (0, 1)  # all


def test_resolve_layout_auto_manual_and_idempotent(monkeypatch):
    monkeypatch.setattr(layout.jax, "device_count", lambda: 2)
    cfg = RunConfig(cohort=10)
    got, lay = resolve_layout(cfg)
    assert (got.devices, got.client_lanes, lay.mode, lay.devices) == (2, 1, "auto", 2)
    again, lay2 = resolve_layout(got)  # a resolved configuration resolves to itself
    assert again == got and lay2 == lay
    # a layout field set away from its default, or layout="manual", is taken as given
    for c in (RunConfig(cohort=10, client_lanes=3), RunConfig(cohort=10, layout="manual")):
        out, lay = resolve_layout(c)
        assert out == c and lay.mode == "manual"
    # an odd cohort on 2 devices, or an algorithm with its own cohort loop: one device
    assert resolve_layout(RunConfig(cohort=5))[0].devices == 1
    out, lay = resolve_layout(RunConfig(cohort=10), algorithm_layouts=False)
    assert (out.devices, out.client_lanes, lay.mode) == (1, 0, "auto")


def _args(argv):
    return make_parser().parse_args(argv)


@pytest.mark.parametrize("argv, want", [
    (["run"], 2),  # default cohort 10 on 2 cores
    (["run", "--cohort", "5"], 0),  # odd: one device, no split
    (["run", "--layout", "manual"], 0),
    (["run", "--devices", "2"], 0),  # a layout flag given: manual
    (["run", "--client-lanes", "1"], 0),
    (["run", "--cpu-devices", "3"], 3),  # as given
    (["run", "--num-processes", "2", "--process-id", "0",
      "--coordinator-address", "h:1"], 0),  # several processes: never split
    (["sweep", "--grid", "client_lr=0.1,0.2"], 2),  # a sweep: every core
])
def test_command_line_cpu_split(monkeypatch, argv, want):
    monkeypatch.setattr(layout, "host_cores", lambda: 2)
    for var in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert cpu_devices_for(_args(argv)) == want


def test_config_file_layout_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "host_cores", lambda: 2)
    (tmp_path / "m.toml").write_text('layout = "manual"\n')
    (tmp_path / "c.toml").write_text("cohort = 4\n")
    assert cpu_devices_for(_args(["run", "--config", str(tmp_path / "m.toml")])) == 0
    assert cpu_devices_for(_args(["run", "--config", str(tmp_path / "c.toml")])) == 2


def test_auto_split_keeps_a_running_jax(monkeypatch):
    """With JAX already running on one CPU device (the test process), the automatic split
    cannot change it: one device (0), whatever the cohort; in a fresh process it splits."""
    import subprocess
    import sys

    from fedjax_appeal.execute.layout import auto_split

    monkeypatch.setattr("fedjax_appeal.execute.layout.host_cores", lambda: 4)
    assert jax.device_count() == 1
    assert auto_split(12) == 0 and auto_split(7) == 0
    code = ("import jax\nfrom fedjax_appeal.execute import layout\n"
            "layout.host_cores = lambda: 4\n"
            "print(layout.auto_split(6), layout.auto_split(6), jax.device_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["3", "3", "3"]  # the largest divisor of 6 among 4 cores; asked twice
