"""Shared fixtures: tiny federations and models that compile fast on a 2-core CPU."""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.core.arrays import ClientArrays, FederatedData
from fedjax_appeal.core.config import RunConfig
from fedjax_appeal.core.models import Model, make_model
from fedjax_appeal.execute.runtime import release_programs_if_crowded

# Most of the suite's time is XLA compiling the same small programs again: every run builds
# its round afresh, and many tests run the same tiny configuration. JAX's persistent
# compilation cache, in a folder of this session, gives a program compiled before (same
# lowered module, options and versions) back from disk; the executable is the one a fresh
# compile makes, so no value changes. Subprocesses compile as a user's run does, except
# where a test adds XLA_CACHE_ENV to one: a single-process run started one after another
# with the test's own runs, whose compilation is not what the test checks (signals, locks).
# Several processes of one run (test_multiprocess) and fake devices keep compiling afresh.
# Set up in pytest_configure, so that a script importing this module does not turn it on.
XLA_CACHE_ENV: dict[str, str] = {}

# The rest of that time is XLA:CPU's LLVM back end optimising machine code for programs that
# then run for milliseconds. The tests compile at LLVM optimisation level 0: the same HLO
# (XLA's own graph passes still run), less optimised machine code. A run of a user is not
# affected. The golden histories, recorded at the default level, hold at their tolerances
# under it. Set in the environment, so that the tests' subprocesses compile the same way;
# an XLA_FLAGS that already names a level is left as it is.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"


def with_test_xla_flags(flags: str = "") -> str:
    """`flags` (an XLA_FLAGS value) with the tests' optimisation level added, unless it names
    one."""
    if "xla_backend_optimization_level" in flags:
        return flags
    return f"{flags} {TEST_XLA_FLAGS}".strip()


def pytest_configure(config):
    # before the first jax.devices() below: XLA reads its flags when the backend starts
    os.environ["XLA_FLAGS"] = with_test_xla_flags(os.environ.get("XLA_FLAGS", ""))
    cache = tempfile.mkdtemp(prefix="fedjax-appeal-tests-xla-")
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # The test process is one CPU device: started here, so that the automatic layout of an
    # in-process `main([...])` finds JAX running and leaves it (subprocess tests split).
    jax.devices()
    XLA_CACHE_ENV.update({"JAX_COMPILATION_CACHE_DIR": cache,
                          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                          "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})


@pytest.fixture(autouse=True)
def _room_for_programs():
    """A test worker compiles thousands of programs over a session, about 20 memory
    mappings each: past half of `vm.max_map_count` they are dropped after the test
    (`release_programs_if_crowded`), before the kernel refuses a mapping and XLA crashes
    the worker."""
    yield
    release_programs_if_crowded()


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def bench_script(monkeypatch):
    """Import a script of `benchmarks/` by module name, its folder on `sys.path` for this
    test only; the modules it imported are dropped from `sys.modules` afterwards."""
    loaded = []

    def load(name: str):
        monkeypatch.syspath_prepend(str(BENCHMARKS))
        loaded.append(name)
        return importlib.import_module(name)

    yield load
    for name in loaded:
        sys.modules.pop(name, None)


class NoBiasLinear(nn.Module):
    """y = w . x, one output (for hand-computed least-squares tests)."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(1, use_bias=False)(x.reshape((x.shape[0], -1)))


def linear_model(dim: int = 1) -> Model:
    return Model(NoBiasLinear(), (dim,), jnp.float32, "linear", objective="mse")


def arrays_from_clients(xs: list[np.ndarray], ys: list[np.ndarray]) -> ClientArrays:
    x = np.concatenate(xs)
    y = np.concatenate(ys)
    idx, o = [], 0
    for c in xs:
        idx.append(np.arange(o, o + len(c)))
        o += len(c)
    return ClientArrays.from_indices(x, y, idx)


def tiny_run_config(**kw) -> RunConfig:
    """A RunConfig for the tiny federation of `make_tiny_data(unseen=3)` (keywords override)."""
    base = dict(clients=6, unseen_clients=3, cohort=3, local_steps=2, batch_size=4, rounds=2,
                eval_every=1, rho_steps=3)
    return RunConfig(**{**base, **kw})


def make_tiny_data(num_clients=6, dim=5, classes=3, seed=0, sizes=None, unseen=0,
                   uint8=False) -> FederatedData:
    """Random classification federation; clients of different sizes."""
    rng = np.random.default_rng(seed)
    sizes = sizes or [int(s) for s in rng.integers(4, 20, num_clients + unseen)]
    parts = {}
    for split, frac in (("train", 1.0), ("test", 0.5)):
        xs, ys = [], []
        for n in sizes:
            m = max(2, int(n * frac))
            x = rng.normal(size=(m, dim)).astype(np.float32)
            if uint8:
                x = rng.integers(0, 256, size=(m, dim)).astype(np.uint8)
            xs.append(x)
            ys.append(rng.integers(0, classes, m))
        parts[split] = (xs, ys)
    kw = dict(train=arrays_from_clients(parts["train"][0][:num_clients],
                                        parts["train"][1][:num_clients]),
              test=arrays_from_clients(parts["test"][0][:num_clients],
                                       parts["test"][1][:num_clients]))
    if unseen:
        kw.update(unseen_train=arrays_from_clients(parts["train"][0][num_clients:],
                                                   parts["train"][1][num_clients:]),
                  unseen_test=arrays_from_clients(parts["test"][0][num_clients:],
                                                  parts["test"][1][num_clients:]))
    return FederatedData(**kw, num_classes=classes, name="tiny")


@pytest.fixture
def tiny_data():
    return make_tiny_data()


@pytest.fixture
def tiny_model():
    return make_model("logistic", "tiny", 3, (5,), jnp.float32, scale=1.0)


def shared_data_dir() -> str:
    """The folder of npz data files named by $FEDJAX_APPEAL_DATA.

    A test that needs it fails (never skips silently) with a one-line message saying how to
    set it; such tests carry the `data` marker, so `pytest -m "not data"` leaves them out
    on purpose.
    """
    d = os.environ.get("FEDJAX_APPEAL_DATA")
    if not d or not os.path.isdir(d):
        what = "is not set" if not d else f"= {d!r} is not a folder"
        pytest.fail(f"FEDJAX_APPEAL_DATA {what}: export FEDJAX_APPEAL_DATA=<folder of the npz "
                    "data files> (see README, Data), or leave the data tests out with "
                    "-m 'not data'", pytrace=False)
    return d


def lsq_rows_data(rows):
    """One client per (x, y, n): n identical rows, so every minibatch gradient is exact."""
    xs = [np.full((n, 1), x, np.float32) for x, _, n in rows]
    ys = [np.full(n, y, np.float32) for _, y, n in rows]
    tr = arrays_from_clients(xs, ys)
    return FederatedData(train=tr, test=tr, num_classes=1, name="lsq")


def set_w(state, w):
    """`state` with every parameter set to the scalar `w` (one-parameter models)."""
    return state.replace(params=jax.tree.map(lambda a: jnp.full_like(a, w), state.params))


def scalar_w(state) -> float:
    """The one scalar parameter of `state`."""
    return float(jax.tree.leaves(state.params)[0].reshape(()))


def assert_refused(argv, out, capsys, msg: str) -> None:
    """`fedjax-appeal ARGV` exits 2 with one `fedjax-appeal: error:` line containing `msg`,
    and `out` (the run's folder, inside an otherwise empty tmp folder) is not written."""
    from fedjax_appeal.cli.commands import main

    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedjax-appeal: error:") and msg in err[0], err
    assert not out.exists() and list(out.parent.iterdir()) == []
