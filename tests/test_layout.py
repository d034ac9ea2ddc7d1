"""The automatic execution layout (execute/layout.py): the rule, its resolution in a run's
configuration, and the CPU split the command line makes before JAX runs."""

from __future__ import annotations

import jax
import jax.extend
import pytest

from fedjax_appeal.cli.commands import make_parser
from fedjax_appeal.cli.process import cpu_devices_for
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


def _dot_widths(jaxpr) -> set[int]:
    """The leading size of every 2-D left operand of a dot_general in `jaxpr` (and in the
    programs it calls): the clients one vmapped `x @ w` takes side by side (1 = unbatched)."""
    out = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            shape = eqn.invars[0].aval.shape
            out.add(shape[0] if len(shape) == 2 else 1)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            out |= _dot_widths(sub)
    return out


@pytest.mark.parametrize("cohort, lanes", [(6, 0), (6, 1), (6, 2), (6, 4), (6, 6), (6, 9),
                                           (1, 0), (5, 3)])
def test_vmap_width_is_what_over_rows_runs(cohort, lanes):
    """On one device, the width `vmap_width` reports is the widest vmap that
    `distributed.over_rows` traces (read from the program's matmuls; a lax.map whose groups
    do not divide the cohort adds a narrower one for the remainder)."""
    import jax.numpy as jnp

    from fedjax_appeal.execute.distributed import over_rows
    from fedjax_appeal.execute.layout import vmap_width

    w = jnp.ones((3, 3))
    rows = jnp.ones((cohort, 3))
    jaxpr = jax.make_jaxpr(lambda r: over_rows(lambda x, s: x @ s, r, lanes, shared=w))(rows)
    assert max(_dot_widths(jaxpr.jaxpr)) == vmap_width(cohort, 1, lanes)


def test_vmap_width_by_hand():
    from fedjax_appeal.execute.layout import vmap_width

    assert vmap_width(10, 2, 1) == 1  # the CPU's automatic layout: one client at a time
    assert vmap_width(10, 2, 0) == 5  # each device's share in one vmap
    assert vmap_width(10, 2, 5) == 5 and vmap_width(10, 2, 2) == 2
    assert vmap_width(9, 2, 1) == 5  # 2 does not divide 9: one sharded vmap
    assert vmap_width(10, 1, 1, client_chunk=4) == 4  # chunks of 4, each one vmap
    assert vmap_width(10, 1, 1, client_chunk=10) == 1  # a chunk of the whole cohort: none


def test_conv_impl_follows_the_layout():
    """"auto" convolves by the pooled form with Winograd for the layers it does not fold
    where each device trains one client at a time, by the pooled form with the
    channels-first im2col where a device trains several in one vmap (CPU); a name given
    is kept; the GPU's form does not depend on the layout."""
    from fedjax_appeal.execute.layout import conv_impl_for

    split = RunConfig(cohort=10, devices=2, client_lanes=1)
    assert conv_impl_for(split, backend="cpu") == "pooled_winograd_train"
    assert conv_impl_for(RunConfig(cohort=10), backend="cpu") == "pooled_cf_train"
    assert conv_impl_for(RunConfig(cohort=1), backend="cpu") == "pooled_winograd_train"
    one_lane = RunConfig(cohort=10, client_lanes=1)
    assert conv_impl_for(one_lane, backend="cpu") == "pooled_winograd_train"
    assert conv_impl_for(split.replace(client_chunk=4), backend="cpu") == "pooled_cf_train"
    # one device, in turn
    assert conv_impl_for(split, 1, backend="cpu") == "pooled_winograd_train"
    odd = RunConfig(cohort=9, devices=2, client_lanes=1)  # 2 does not divide 9: one vmap
    assert conv_impl_for(odd, backend="cpu") == "pooled_cf_train"
    assert conv_impl_for(RunConfig(cohort=10, conv_impl="winograd"), backend="cpu") == "winograd"
    for cfg in (split, RunConfig(cohort=10)):
        assert conv_impl_for(cfg, backend="gpu") == "patches_train"
        assert conv_impl_for(cfg, backend="tpu") == "xla"


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's rule")
@pytest.mark.parametrize("lanes, want", [(1, "pooled_winograd_train"), (0, "pooled_cf_train")])
def test_assemble_builds_the_model_with_the_layouts_convolution(lanes, want):
    """What a run and a sweep build (`assemble`): the model convolves as its layout says."""
    from fedjax_appeal.run.assemble import assemble

    cfg = RunConfig(dataset="mnist", model="simple_cnn", partition="dirichlet", clients=8,
                    unseen_clients=0, cohort=4, max_samples=400, layout="manual",
                    client_lanes=lanes)
    assert assemble(cfg).model.module.conv_impl == want


def test_the_reason_of_an_unsplit_cpu_names_the_cohort_and_the_cores(monkeypatch):
    from fedjax_appeal.execute import layout

    monkeypatch.setattr(layout, "host_cores", lambda: 2)
    assert layout.choose(5, backend="cpu", device_count=1, processes=1) == (
        1, 0, "cohort 5 has no divisor in 2..2 (the host's cores), so the CPU is not split")
    monkeypatch.setattr(layout, "host_cores", lambda: 1)
    assert layout.choose(5, backend="cpu", device_count=1, processes=1)[2] == (
        "only 1 cpu device visible")
    assert layout.choose(7, backend="gpu", device_count=4, processes=1)[2] == (
        "no divisor of cohort 7 in 2..4 devices")
