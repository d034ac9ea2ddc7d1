"""Several devices: 8 fake CPU devices give the 1-device history; chunked cohorts equal
unchunked ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import make_tiny_data, with_test_xla_flags

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.execute.cohort import chunk_size
from fedjax_appeal.execute.layout import host_cores, largest_divisor
from fedjax_appeal.run.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]

# Runs in a fresh interpreter: the device-count flag must be set before jax is imported.
SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import jax, numpy as np
from conftest import make_tiny_data
from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.run.simulate import simulate
from fedjax_appeal.execute.executor import for_each_client
from fedjax_appeal.execute.distributed import make_mesh
from fedjax_appeal.core.jaxpr import jaxpr_eqns

assert len(jax.devices()) == 8, jax.devices()
data = make_tiny_data(num_clients=16, unseen=2)
model = make_model("mlp", "tiny", 3, (5,), np.float32, scale=1.0)
out = {}
# (devices, lanes): 2 devices x 4 clients one at a time / 3 then 1; 3 devices do not divide 8
for dev, lanes in ((1, 0), (8, 0), (2, 1), (2, 3), (3, 2)):
    cfg = RunConfig(clients=16, unseen_clients=2, cohort=8, local_steps=3, batch_size=4,
                    devices=dev, client_lanes=lanes)
    alg = build("fedavg", model, cfg)
    res = simulate(alg, data, HParams(client_lr=0.1), jax.random.key(0), rounds=4,
                   eval_every=2, mesh=make_mesh(dev))
    out[f"{dev}/{lanes}"] = {"history": res.history,
                "idx": np.asarray(res.round_metrics["cohort_idx"]).tolist(),
                "devices": len(jax.tree.leaves(res.final_state.params)[0].sharding.device_set)}
# each device's clients as a program of its own (the path of models with a large parameter
# array, distributed.own_program): the tiny MLP forced onto it, same history
import fedjax_appeal.execute.distributed as dist
dist.OWN_PROGRAM_MIN_PARAM = 1
for dev, lanes in ((2, 1), (2, 3)):
    cfg = RunConfig(clients=16, unseen_clients=2, cohort=8, local_steps=3, batch_size=4,
                    devices=dev, client_lanes=lanes)
    res = simulate(build("fedavg", model, cfg), data, HParams(client_lr=0.1),
                   jax.random.key(0), rounds=4, eval_every=2, mesh=make_mesh(dev))
    out[f"{dev}/{lanes} own"] = {"history": res.history,
                "idx": np.asarray(res.round_metrics["cohort_idx"]).tolist(),
                "devices": len(jax.tree.leaves(res.final_state.params)[0].sharding.device_set)}
# lanes under a mesh: each device loops over its m / D clients (a scan of m / D / lanes),
# a shard_map around it where the model has a parameter array of OWN_PROGRAM_MIN_PARAM
# elements (1 now) or more, a vmap over the device axis otherwise
from typing import NamedTuple
class St(NamedTuple):
    params: dict
def scans(lanes, dev, big=True):
    f0 = for_each_client(lambda st, d, k, key, hp: 2.0 * k, lanes, make_mesh(dev))
    f = lambda st, d, k, key, hp: f0(St({"w": jax.numpy.zeros((2 if big else 0,))}), d, k,
                                     key, hp)
    idx = jax.numpy.arange(8)
    keys = jax.random.split(jax.random.key(0), 8)
    got = jax.jit(f)(None, None, idx, keys, None)
    assert np.array_equal(np.asarray(got), 2.0 * np.arange(8)), got
    eqns = list(jaxpr_eqns(jax.make_jaxpr(f)(None, None, idx, keys, None)))
    return (sorted(e.params["length"] for e in eqns if e.primitive.name == "scan"),
            sum(e.primitive.name == "shard_map" for e in eqns))
out["scans"] = {"2/1": scans(1, 2), "2/3": scans(3, 2), "2/0": scans(0, 2),
                "3/2": scans(2, 3), "2/1 small": scans(1, 2, big=False)}

# a sweep's batch of 4 runs sharded over 2 devices: one vmap, or each device's 2 runs in turn
from fedjax_appeal.data import load_federated
from fedjax_appeal.run.driver import combine_lanes
from fedjax_appeal.run.sweep import sweep
g = combine_lanes(lambda st, d, key, hp, r: st * hp, 1, 4, make_mesh(2))
x = jax.numpy.arange(4.0)
got = jax.jit(g, static_argnums=4)(x, None, jax.random.split(jax.random.key(0), 4), x + 1, 1)
assert np.array_equal(np.asarray(got), np.arange(4.0) * np.arange(1.0, 5.0)), got
jp = jax.make_jaxpr(g, static_argnums=4)(x, None, jax.random.split(jax.random.key(0), 4),
                                         x, 1)
out["sweep_scans"] = [e.params["length"] for e in jaxpr_eqns(jp) if e.primitive.name == "scan"]
scfg = RunConfig(algorithm="fedavg", dataset="synthetic", partition="natural", clients=5,
                 unseen_clients=2, cohort=3, rounds=2, local_steps=2, batch_size=4,
                 eval_every=1, min_samples=4, appeal=False)
sdata, sds = load_federated(scfg)
for dev, lanes in ((1, 0), (2, 0), (2, 1)):
    res = sweep(scfg, {"client_lr": [0.3, 0.05]}, [0, 3], data=sdata, dataset=sds,
                max_parallel=4, lanes=lanes, mesh=make_mesh(dev))
    out[f"sweep {dev}/{lanes}"] = [r["history"] for r in res.rows]

# passes over all clients traced under the mesh spread their rows over its devices
from fedjax_appeal.evaluate.evaluation import evaluate_global
from fedjax_appeal.local.solo import solo_stats
params, st = model.init(jax.random.key(1))
def passes(p, s, d):
    ev = evaluate_global(model, p, s, d, chunk=8)
    so = solo_stats(model, p, s, d.train, d.test, jax.random.key(2), 0.1, steps=3,
                    batch_size=4, chunk=8)
    return {k: (v.loss, v.acc) for k, v in ev.items()}, so
def traced(mesh):
    args = (params, st, data)
    if mesh is None:
        return jax.jit(passes)(*args), str(jax.make_jaxpr(passes)(*args))
    with jax.set_mesh(mesh):
        return jax.jit(lambda *a: passes(*a))(*args), str(jax.make_jaxpr(passes)(*args))
(plain, jp_plain), (spread_, jp_spread) = traced(None), traced(make_mesh(2))
# one client at a time on each device: 7 rows over 2 devices (the last one repeated), each
# device's loop a program of its own; and per-client gradients (DivFL's features) equal to
# one device's to the bit
from fedjax_appeal.execute.distributed import map_spread
from fedjax_appeal.select.selectors import client_grad, flatten
rows = (jax.numpy.arange(7.0), jax.numpy.arange(14.0).reshape(7, 2))
fn = lambda r, sh: r[0] * sh + r[1].sum()
def grads(ks, sh):
    return map_spread(lambda k, s: flatten(client_grad(model, *s, k)[1]), ks, sh)
gsh = (params, st, data.train)
with jax.set_mesh(make_mesh(2)):
    got = jax.jit(lambda r, s: map_spread(fn, r, s))(rows, 10.0)
    jm = str(jax.make_jaxpr(lambda r, s: map_spread(fn, r, s))(rows, 10.0))
    g2 = jax.jit(grads)(jax.numpy.arange(16), gsh)
want = np.asarray(jax.lax.map(lambda r: fn(r, 10.0), rows))
g1 = jax.jit(grads)(jax.numpy.arange(16), gsh)
# grouped: row i runs fns[i % 3] (group 2 of rows 2 and 5 on different devices)
fns = [lambda r, sh, j=j: (j + 1) * fn(r, sh) for j in range(3)]
grp = lambda r, sh: r[0].astype(jax.numpy.int32) % 3
with jax.set_mesh(make_mesh(2)):
    gm = jax.jit(lambda r, s: map_spread(fns, r, s, group=grp))(rows, 10.0)
gp = jax.jit(lambda r, s: map_spread(fns, r, s, group=grp))(rows, 10.0)
want_g = [(i % 3 + 1) * w for i, w in enumerate(want.tolist())]
out["map_spread"] = [np.asarray(got).tolist() == want.tolist(), jm.count("shard_map"),
                     jm.count("sharding_constraint"),
                     bool(np.array_equal(np.asarray(g1), np.asarray(g2))),
                     np.asarray(gm).tolist() == want_g, np.asarray(gp).tolist() == want_g]
out["spread"] = {"plain": "sharding_constraint" in jp_plain,
                 "mesh": jp_spread.count("sharding_constraint"),
                 "same": bool(all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(
                     jax.tree.leaves(plain), jax.tree.leaves(spread_), strict=True)))}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_eight_fake_devices_equal_one_device():
    """8 devices, and 2 devices each running its clients in lanes, give the 1-device
    history."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
           "XLA_FLAGS": with_test_xla_flags("--xla_force_host_platform_device_count=8")}
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "tests")], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # lanes 1: 4 clients per device one by one; lanes 3: a scan of 1 (3 clients) + the rest
    # of 1, each device's loop a program of its own (one shard_map); no lanes, or 3 devices
    # for 8 clients: one sharded vmap, no scan
    assert out.pop("scans") == {"2/1": [[4], 1], "2/3": [[1], 1], "2/0": [[], 0],
                                "3/2": [[], 0], "2/1 small": [[4], 0]}
    assert out.pop("sweep_scans") == [2]  # 2 runs per device, one at a time
    # under a mesh only: evaluation of 4 splits (rows spread, loss and correct collected:
    # 12) and the solo models (ks and keys spread, 5 statistics collected: 7), with the
    # numbers of one device
    assert out.pop("spread") == {"plain": False, "mesh": 19, "same": True}
    # one program per device (a shard_map), its output collected (one constraint); the
    # gradients of 16 clients on 2 devices equal one device's bit for bit; grouped (each
    # row the function its group names): the same under the mesh and without, both the
    # per-row product by hand
    assert out.pop("map_spread") == [True, 1, 1, True, True, True]
    swept = {k: out.pop(k) for k in list(out) if k.startswith("sweep")}
    for name in ("sweep 2/0", "sweep 2/1"):  # every row of every layout equals 1 device's
        for rows_a, rows_b in zip(swept["sweep 1/0"], swept[name], strict=True):
            for a, b in zip(rows_a, rows_b, strict=True):
                for k in a:
                    np.testing.assert_allclose(a[k], b[k], rtol=2e-4, atol=2e-5,
                                               err_msg=f"{name} {k}")
    one = out.pop("1/0")
    assert one["devices"] == 1
    for name, other in out.items():
        assert other["devices"] == int(name.split("/")[0]), name  # replicated over the mesh
        # (the "own" runs: each device's clients as a program of its own)
        assert one["idx"] == other["idx"], name  # same cohorts
        for a, b in zip(one["history"], other["history"], strict=True):
            assert a["round"] == b["round"]
            for k in ("train_loss", "test_loss_seen", "test_acc_seen", "test_loss_unseen"):
                np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.slow
def test_chunked_cohort_equals_unchunked():
    data = make_tiny_data(num_clients=10, unseen=0)
    model = make_model("mlp", "tiny", 3, (5,), np.float32, scale=1.0)
    res = {}
    for chunk in (-1, 3):  # never chunk / chunks of 3 clients (7 = 3 + 3 + 1 padded)
        cfg = RunConfig(clients=10, unseen_clients=0, cohort=7, local_steps=2, batch_size=4,
                        client_chunk=chunk, aggregation="proportional")
        alg = build("fedprox", model, cfg)
        res[chunk] = simulate(alg, data, HParams(client_lr=0.1, prox_mu=0.1),
                              jax.random.key(2), rounds=3, eval_every=3)
    for a, b in zip(jax.tree.leaves(res[-1].final_state.params),
                    jax.tree.leaves(res[3].final_state.params), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    for k in ("cohort_loss", "cohort_weights", "cohort_idx"):
        np.testing.assert_allclose(res[-1].round_metrics[k], res[3].round_metrics[k],
                                   rtol=1e-6)


def test_chunk_size_rules():
    params = {"w": np.zeros((100, 10), np.float32)}  # 1000 params
    assert chunk_size(-1, 50, params) == 0
    assert chunk_size(8, 50, params) == 8
    assert chunk_size(64, 50, params) == 0  # chunk >= cohort: unchunked
    assert chunk_size(0, 50, params) == 0  # auto: 50 x 16 kB fits
    big = {"w": jax.ShapeDtypeStruct((10**8,), np.float32)}
    assert 1 <= chunk_size(0, 10**5, big) < 10**5  # auto: 10^5 x 1.6 GB does not


# --- several processes: flags, cluster detection, the stderr filter (no runtime started) --
import io  # noqa: E402

import pytest  # noqa: E402

from fedjax_appeal.cli.commands import main  # noqa: E402
from fedjax_appeal.execute import distributed  # noqa: E402
from fedjax_appeal.execute.stderr_filter import run as filter_stderr  # noqa: E402


@pytest.mark.parametrize("flags,msg", [
    (["--coordinator-address", "127.0.0.1:1234"], "need all three"),
    (["--num-processes", "2", "--process-id", "0"], "need all three"),
    (["--coordinator-address", "127.0.0.1", "--num-processes", "2", "--process-id", "0"],
     "write HOST:PORT"),
    (["--coordinator-address", "h:99999", "--num-processes", "2", "--process-id", "0"],
     "write HOST:PORT"),
    (["--coordinator-address", "h:1234", "--num-processes", "2", "--process-id", "2"],
     "--process-id 2 must lie in 0 .. 1"),
    (["--heartbeat-timeout", "0"], "--heartbeat-timeout must be >= 1"),
    (["--cpu-devices", "-1"], "--cpu-devices must be >= 0"),
    (["--cpu-devices", "2"], "--cpu-devices must be set before JAX runs"),  # JAX runs here
])
def test_process_flags_refused_in_one_line(tmp_path, capsys, monkeypatch, flags, msg):
    def never(*a, **k):
        raise AssertionError("the runtime was started")

    monkeypatch.setattr(jax.distributed, "initialize", never)
    assert jax.device_count() >= 1  # JAX has run in this process (for --cpu-devices 2)
    assert main(["run", "--dataset", "synthetic", *flags, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedjax-appeal: error:") and msg in err[0]
    assert not (tmp_path / "r").exists()


def test_one_process_and_cluster_detection(monkeypatch):
    for var in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "JAX_COORDINATOR_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    assert distributed.detected_cluster() is None
    monkeypatch.setenv("SLURM_NTASKS", "1")  # a one-task job is a single process
    assert distributed.detected_cluster() is None
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert distributed.detected_cluster() == "SLURM"
    monkeypatch.delenv("SLURM_NTASKS")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert distributed.detected_cluster() == "Open MPI"
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    # no flags, no cluster: nothing is started; one process given explicitly: neither
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: 1 / 0)
    assert distributed.initialize() is False
    assert distributed.initialize("127.0.0.1:1234", 1, 0) is False
    # one process: fetch is device_get, agree passes the verdict through
    a = jax.numpy.arange(3.0)
    np.testing.assert_array_equal(distributed.fetch({"a": a})["a"], [0.0, 1.0, 2.0])
    assert distributed.agree(True) and not distributed.agree(False)
    assert not distributed.is_peer_failure(RuntimeError("gloo connection closed"))


FATAL = """\
[fedavg] round    4/30  train_loss 0.4703
E1123 23:58:05.194063    9241 coordination_service_agent.cc:289] Polled an error from \
coordination service (this can be an error from this or another task).
F1123 23:58:05.194120    9241 client.h:80] Terminating process because the JAX distributed \
service detected fatal errors. This most likely indicates that another task died.
Additional GRPC error information from remote target coordination_service:
:UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"Socket closed"}
*** Check failure stack trace: ***
    @     0x7f178e040634  absl::log_internal::LogMessage::SendToLog()
"""


def test_stderr_filter_reduces_a_runtime_abort_to_one_line():
    out = io.StringIO()
    filter_stderr(io.StringIO("W1123 00:00:00.000000  1 x.cc:1] unrelated warning\n"
                              + distributed.ADVICE_TAG + "the last checkpoint stays in D\n"
                              + FATAL), out)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("unrelated warning")  # before the failure: passed through
    assert lines[1].startswith("[fedavg] round    4/30")
    assert lines[2] == ("fedjax-appeal: error: another process of this job stopped "
                        "(Terminating process because the JAX distributed service detected "
                        "fatal errors); no results written; the last checkpoint stays in D")
    assert len(lines) == 3
    # the process said it itself (Python path): no second line
    out = io.StringIO()
    filter_stderr(io.StringIO("fedjax-appeal: error: process 0 of 2: another process ...\n"
                              + FATAL), out)
    assert out.getvalue().count("fedjax-appeal: error:") == 1
    # a runtime warning written into the middle of our error line (another thread, same
    # fd): split off and dropped, the error line stays whole
    out = io.StringIO()
    filter_stderr(io.StringIO(
        "fedjax-appeal: error: process 1 of 2: another process of this job stopped (x); "
        "no results written; start again with --resume D/kW1126 04:36:08.854254   14972 "
        "preemption_sync_manager.cc:147] Failed to retrieve preemption notice from "
        "coordination service: UNAVAILABLE: Socket closed\n" + FATAL), out)
    assert out.getvalue().splitlines() == [
        "fedjax-appeal: error: process 1 of 2: another process of this job stopped (x); "
        "no results written; start again with --resume D/k",
        "[fedavg] round    4/30  train_loss 0.4703"]
    # a normal run: everything passes unchanged
    text = "fedjax-appeal: fedavg on synthetic\n[fedavg] round 2/2\nTraceback (most recent)\n"
    out = io.StringIO()
    filter_stderr(io.StringIO(text), out)
    assert out.getvalue() == text


def test_runtime_that_cannot_start_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_"))}
    env.update(JAX_COORDINATOR_ADDRESS="127.0.0.1:1", JAX_PLATFORMS="cpu",
               PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "fedjax_appeal", "run", "--dataset", "synthetic",
                        "--out", str(tmp_path / "r")], env=env, capture_output=True, text=True,
                       timeout=120)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1, r.stderr[-2000:]
    assert "multi-process runtime did not start" in err[0]
    assert not (tmp_path / "r").exists()


def test_cpu_devices_shard_the_cohort_and_keep_the_history(tmp_path):
    """`--cpu-devices 2 --devices 2` in a fresh process: two CPU devices, the cohort sharded
    over them, and the one-device history up to float summation order."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_"))}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env["XLA_FLAGS"] = with_test_xla_flags()  # no device count of the caller's
    flags = ["run", "--dataset", "synthetic", "--clients", "8", "--unseen-clients", "0",
             "--cohort", "4", "--rounds", "3", "--local-steps", "3", "--batch-size", "8",
             "--eval-every", "1", "--min-samples", "4", "--partition", "natural",
             "--no-appeal", "--client-lr", "0.3"]
    res = {}
    for name, extra in (("one", ["--layout", "manual"]),
                        ("two", ["--cpu-devices", "2", "--devices", "2"]), ("auto", [])):
        r = subprocess.run([sys.executable, "-m", "fedjax_appeal", *flags, *extra, "--out",
                            str(tmp_path / name)], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        res[name] = json.loads((tmp_path / name / "results.json").read_text())
    assert res["one"]["environment"]["devices"] == 1
    assert res["two"]["environment"]["devices"] == 2
    assert res["two"]["layout"]["mode"] == "manual"
    # no flags: the automatic layout splits the CPU into the largest divisor of the cohort
    # (4) among the cores this process may use, one client at a time per device
    d = largest_divisor(4, host_cores())
    assert res["auto"]["environment"]["devices"] == (d if d > 1 else 1)
    assert res["auto"]["layout"] == {
        "mode": "auto", "devices": d, "client_lanes": 1 if d > 1 else 0,
        "cpu_devices": d, "backend": "cpu", "why": res["auto"]["layout"]["why"],
        "conv_impl": None}  # an MLP: no convolution
    assert (res["auto"]["config"]["devices"], res["auto"]["config"]["layout"]) == (d, "auto")
    for other in ("two", "auto"):
        for a, b in zip(res["one"]["history"], res[other]["history"], strict=True):
            for k in ("train_loss", "test_acc_seen", "test_loss_seen"):
                assert b[k] == pytest.approx(a[k], rel=1e-5), (other, a["round"], k)


def test_own_program_follows_the_largest_parameter_array():
    """Each device's clients run as a program of their own exactly when the model has a
    parameter array of at least OWN_PROGRAM_MIN_PARAM elements: simple_cnn's dense kernel
    (9216 x 128 on 28x28 inputs) is one, the FMNIST MLP's largest (784 x 64) is not."""
    import jax.numpy as jnp

    from fedjax_appeal.execute.distributed import OWN_PROGRAM_MIN_PARAM, own_program

    assert OWN_PROGRAM_MIN_PARAM == 2 ** 18
    assert own_program({"a": jnp.zeros(5), "b": {"c": jnp.zeros((512, 512))}})
    assert not own_program({"a": jnp.zeros(5), "b": {"c": jnp.zeros((512, 511))}})
    assert not own_program(None) and not own_program({})
    cnn = make_model("simple_cnn", "x", 62, (28, 28), jnp.uint8)
    mlp = make_model("mlp", "x", 10, (784,), jnp.float32)
    assert own_program(jax.eval_shape(cnn.init, jax.random.key(0))[0])
    assert not own_program(jax.eval_shape(mlp.init, jax.random.key(0))[0])
