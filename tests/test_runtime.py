"""What a command sets up before JAX starts (compilation cache, deterministic kernels), the
cache of whole programs, the compile log and the wall-clock split."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import with_test_xla_flags

from fedjax_appeal.core.config import ConfigError
from fedjax_appeal.execute import programs, runtime
from fedjax_appeal.run.wallclock import split_text, time_split

TINY = ["--dataset", "synthetic", "--clients", "8", "--unseen-clients", "4", "--cohort", "3",
        "--rounds", "4", "--local-steps", "2", "--batch-size", "8", "--eval-every", "2",
        "--min-samples", "4", "--partition", "natural"]


def _env(cache: Path, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE",
                                "FEDJAX_APPEAL_COMPILE", "FEDJAX_APPEAL_DETERM"))}
    env.update(FEDJAX_APPEAL_CACHE=str(cache), XLA_FLAGS=with_test_xla_flags(), **extra)
    return env


def test_determinism_flag_is_added_before_the_backend_starts():
    code = ("import os, jax\n"
            "from fedjax_appeal.execute import runtime\n"
            "print(runtime.enable_determinism())\n"
            "print(os.environ['XLA_FLAGS'])\n"
            "jax.devices()\n"
            "print(runtime.runtime_record()['deterministic_ops'])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "XLA_FLAGS": "--xla_backend_optimization_level=0"},
                       timeout=120)
    lines = r.stdout.split("\n")
    assert r.returncode == 0, r.stderr
    assert lines[0] == "True"
    assert lines[1] == "--xla_backend_optimization_level=0 --xla_gpu_deterministic_ops=true"
    assert lines[2] == "True"


def test_determinism_after_the_backend_started_is_refused_or_reported(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
    jax.devices()  # the test process's backend runs already
    with pytest.raises(ConfigError, match="before JAX starts"):
        runtime.enable_determinism()
    assert runtime.enable_determinism(strict=False) is False
    assert "deterministic" not in os.environ["XLA_FLAGS"]
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops=false")
    assert runtime.enable_determinism() is False  # given explicitly: left as it is
    assert os.environ["XLA_FLAGS"] == "--xla_gpu_deterministic_ops=false"
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops")
    assert runtime.deterministic_ops() is True


@pytest.mark.parametrize("value,want", [("", True), ("off", False), ("0", False),
                                        ("no", False), ("on", True), ("1", True)])
def test_env_settings(monkeypatch, value, want):
    monkeypatch.setenv("FEDJAX_APPEAL_X", value)
    assert runtime.env_setting("FEDJAX_APPEAL_X") is want


def test_compile_log_counts_programs_and_cache_hits():
    def f(x):
        return jnp.sin(x) * 3.0 + jnp.float32(np.random.default_rng(7).normal())

    x5, x33 = jnp.ones(5), jnp.ones((3, 3))
    with runtime.CompileLog() as log:
        jax.jit(f).lower(x5).compile()
        jax.jit(lambda x: x @ x.T).lower(x33).compile()
    rec = log.record()
    assert rec["programs"] == 2 and rec["compiled"] + rec["cache_hits"] == 2
    assert rec["xla_s"] > 0 and rec["trace_s"] > 0 and rec["compile_s"] >= rec["xla_s"]
    jax.jit(lambda x: x + 2).lower(x5).compile()  # after the log closed
    assert log.record()["programs"] == 2


def test_time_split_and_its_line():
    s = time_split(10.0, compile_s=3.0, train_s=4.0, eval_s=1.0, data_s=0.5)
    assert s == {"compile": 3.0, "train": 4.0, "eval": 1.0, "data": 0.5, "other": 1.5,
                 "wall": 10.0}
    assert time_split(1.0, compile_s=2.0, train_s=0, eval_s=0, data_s=0)["other"] == 0.0
    log = {"compiled": 5, "cache_hits": 2, "reused": 3, "xla_s": 2.5, "trace_s": 0.25,
           "lower_s": 0.25}
    assert split_text(s, log) == (
        "time: 10.0 s = compile 3.0 s (5 programs compiled, 2 read from XLA's cache, 3 reused "
        "whole; XLA 2.5 s, tracing and lowering 0.5 s) + train 4.0 s + eval 1.0 s + data "
        "0.5 s + other 1.5 s")


def _counter(salt: float):
    """(calls, lower): a program new to XLA's cache of this session (`salt` enters it as a
    constant), and the list of its lowerings."""
    calls = []

    def lower():
        calls.append(1)
        return jax.jit(lambda x: jnp.cumsum(x * 2.0) + salt * 0.0 + salt).lower(jnp.ones(4))

    return calls, lower


def test_program_cache_stores_fresh_compiles_and_reads_them_back(tmp_path):
    args = (jnp.arange(4.0),)
    # a context nobody compiled before: the program is new to XLA's cache too
    pc = programs.ProgramCache(tmp_path, context=f"test {tmp_path}")
    calls, lower = _counter(0.125)
    exe = pc.compiled("prog", args, lower)
    assert calls == [1] and pc.stored == 1 and len(list(tmp_path.glob("*.bin"))) == 1
    again = programs.ProgramCache(tmp_path, context=f"test {tmp_path}")
    exe2 = again.compiled("prog", args, lower)
    assert calls == [1] and again.hits == 1  # read back: neither traced nor compiled
    np.testing.assert_array_equal(exe(*args), exe2(*args))
    np.testing.assert_array_equal(exe2(*args), np.array([0, 2, 6, 12]) + 0.125)
    # another context, role or argument shape is another key
    assert again.key("prog", args) != again.with_context("x").key("prog", args)
    assert again.key("prog", args) != again.key("other", args)
    assert again.key("prog", args) != again.key("prog", (jnp.arange(5.0),))


def test_a_program_is_stored_when_its_lowering_reads_another_from_xlas_cache(tmp_path):
    def make_args():  # runs a small program of its own (a broadcast)
        return (jnp.full(7, 0.375),)

    args = make_args()
    jax.clear_caches()  # ... which XLA now reads back from its persistent cache

    def lower():
        return jax.jit(lambda v: jnp.cumprod(v) + 0.375).lower(*make_args())

    pc = programs.ProgramCache(tmp_path, context=f"nested {tmp_path}")
    exe = pc.compiled("prog", args, lower)
    assert pc.stored == 1  # the broadcast read back is not this program's cache hit
    np.testing.assert_allclose(exe(*args), np.cumprod(np.full(7, 0.375)) + 0.375)


def test_a_torn_entry_is_compiled_afresh(tmp_path):
    args = (jnp.arange(4.0),)
    pc = programs.ProgramCache(tmp_path, context=f"torn {tmp_path}")
    calls, lower = _counter(0.25)
    pc.compiled("prog", args, lower)
    (entry,) = tmp_path.glob("*.bin")
    entry.write_bytes(entry.read_bytes()[:50])
    exe = programs.ProgramCache(tmp_path, context=f"torn {tmp_path}").compiled("prog", args,
                                                                              lower)
    assert calls == [1, 1]
    np.testing.assert_array_equal(exe(*args), np.array([0, 2, 6, 12]) + 0.25)


def test_an_entry_whose_first_call_fails_is_replaced(tmp_path):
    class Broken:
        out_info = None

        def __call__(self, *a):
            raise jax.errors.JaxRuntimeError("NOT_FOUND: Function fusion.1 not found")

    entry = tmp_path / "e.bin"
    entry.write_bytes(b"x")
    calls, lower = _counter(0.5)
    checked = programs._FirstCallChecked(Broken(), entry, lower)
    want = np.array([0, 2, 6, 12]) + 0.5
    np.testing.assert_array_equal(checked(jnp.arange(4.0)), want)
    assert calls == [1] and not entry.exists()
    np.testing.assert_array_equal(checked(jnp.arange(4.0)), want)
    assert calls == [1]


def test_code_fingerprint_follows_a_plugin_file(tmp_path, monkeypatch):
    plugin = tmp_path / "my_plugin_mod.py"
    plugin.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_plugin_mod  # noqa: F401

    before = programs.code_fingerprint()
    plugin.write_text("X = 22\n")  # another size
    assert programs.code_fingerprint() != before
    monkeypatch.delitem(sys.modules, "my_plugin_mod")


@pytest.mark.slow
def test_second_run_reuses_programs_and_repeats_the_history(tmp_path):
    """A cold and a warm `run` in fresh processes: the same history bit for bit, the warm
    one reads its programs back whole, and both record the settings."""
    cache = tmp_path / "cache"
    outs = []
    for i in range(2):
        out = tmp_path / f"r{i}"
        r = subprocess.run([sys.executable, "-m", "fedjax_appeal", "run", *TINY, "--out",
                            str(out)], env=_env(cache), capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("time: ")
        outs.append(json.loads((out / "results.json").read_text()))
    cold, warm = outs
    assert cold["history"] == warm["history"]
    for res in outs:
        rt = res["runtime"]
        assert rt["compilation_cache"] == str(cache / "xla")
        assert rt["program_cache"] == str(cache / "programs")
        assert rt["deterministic_ops"] is True
        assert "--xla_gpu_deterministic_ops=true" in rt["xla_flags"]
        split = res["timing"]["process"]
        assert sum(split[k] for k in ("compile", "train", "eval", "data", "other")) == (
            pytest.approx(split["wall"]))
    assert cold["timing"]["process"]["programs"]["reused"] == 0
    assert cold["timing"]["process"]["programs"]["compiled"] >= 3
    warm_log = warm["timing"]["process"]["programs"]
    assert warm_log["reused"] >= 3 and warm_log["compiled"] == 0
    # turned off: no folder recorded, the flag not added
    out = tmp_path / "off"
    r = subprocess.run([sys.executable, "-m", "fedjax_appeal", "run", *TINY, "--out", str(out),
                        "--no-deterministic"],
                       env=_env(cache, FEDJAX_APPEAL_COMPILE_CACHE="off"),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    rt = json.loads((out / "results.json").read_text())["runtime"]
    assert rt["compilation_cache"] is None and rt["program_cache"] is None
    assert rt["deterministic_ops"] is False


def test_out_of_memory_is_one_line_naming_the_size_and_the_options(tmp_path, capsys,
                                                                   monkeypatch):
    import fedjax_appeal.run.experiment as experiment
    from fedjax_appeal.cli.commands import main

    def exhausted(*a, **k):
        raise jax.errors.JaxRuntimeError(
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.\n"
            "BufferAssignment OOM Debugging.\n...")

    monkeypatch.setattr(experiment, "run_config", exhausted)
    out = tmp_path / "r"
    assert main(["run", *TINY, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "fedjax-appeal: error: the device ran out of memory asking for 16.00 GiB "
        "(17,179,869,184 bytes): lower what runs at once with --client-chunk N (clients "
        "trained at once; 0 = the whole cohort), a smaller --cohort or --batch-size, or "
        "--devices to spread the cohort")
    assert not any("Traceback" in x for x in err)
    assert not (out / "results.json").exists()
    sweep_msg = runtime.out_of_memory_message(RuntimeError("out of memory"), "sweep")
    assert sweep_msg.startswith("the device ran out of memory: lower what runs at once with "
                                "--max-parallel N")
    assert not runtime.out_of_memory(ValueError("out of memory in my own code"))


def test_the_program_cache_keeps_its_size_by_dropping_the_least_recently_used(tmp_path):
    for i, age in enumerate([50, 10, 40, 20, 30]):  # seconds ago
        p = tmp_path / f"e{i}.bin"
        p.write_bytes(b"x" * 100)
        t = time.time() - age
        os.utime(p, (t, t))
    (tmp_path / "other.txt").write_bytes(b"y" * 1000)  # not an entry: never touched
    assert programs.prune(tmp_path, 600) == 0  # 500 bytes of entries: under the cap
    # over 400: delete the oldest (e0 at 50 s, e2 at 40 s) until at most 80% = 320 remain
    assert programs.prune(tmp_path, 400) == 2
    assert sorted(p.name for p in tmp_path.glob("*.bin")) == ["e1.bin", "e3.bin", "e4.bin"]
    assert (tmp_path / "other.txt").exists()


def test_entries_without_access_times_are_adopted_so_the_bounded_cache_can_write(tmp_path):
    from jax._src.lru_cache import LRUCache

    old = tmp_path / "jit_f-0123-cache"
    old.write_bytes(b"x" * 10)
    os.utime(old, ns=(5_000_000_000, 5_000_000_000))
    (tmp_path / "jit_g-4567-cache").write_bytes(b"y")
    (tmp_path / "jit_g-4567-atime").write_bytes((7).to_bytes(8, "little"))
    cache = LRUCache(str(tmp_path), max_size=1 << 20)
    with pytest.raises(FileNotFoundError):  # what every write of such a folder meets
        cache.put("jit_h-89ab", b"z")
    assert runtime.adopt_entries(tmp_path) == 1
    assert (tmp_path / "jit_f-0123-atime").read_bytes() == (5_000_000_000).to_bytes(8, "little")
    assert (tmp_path / "jit_g-4567-atime").read_bytes() == (7).to_bytes(8, "little")
    cache.put("jit_h-89ab", b"z")
    assert cache.get("jit_h-89ab") == b"z"
    assert runtime.adopt_entries(tmp_path) == 0


@pytest.mark.skipif(runtime.memory_maps() is None, reason="needs /proc (Linux)")
def test_crowded_process_drops_its_compiled_programs_and_recompiles_them_alike():
    fns = [jax.jit(lambda x, i=i: jnp.sin(x) * i + jnp.cumsum(x)) for i in range(60)]
    first = [f(jnp.arange(8.0) + i) for i, f in enumerate(fns)]
    held, limit = runtime.memory_maps()
    assert not runtime.release_programs_if_crowded(fraction=1.0)  # far from the limit
    assert runtime.release_programs_if_crowded(fraction=held / limit / 2)
    freed = held - runtime.memory_maps()[0]
    assert freed > 60 * 5, freed  # every program held several mappings
    again = [f(jnp.arange(8.0) + i) for i, f in enumerate(fns)]
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(runtime.memory_maps() is None, reason="needs /proc (Linux)")
def test_a_sweep_in_a_crowded_process_drops_the_programs_before_it_compiles(monkeypatch):
    # a sweep of many configurations builds a driver per configuration: each must check
    # the process's mappings, as `run_config` does, or a long sweep crashes in XLA
    import fedjax_appeal as fa

    cfg = fa.RunConfig(dataset="synthetic", partition="natural", clients=6, cohort=2,
                       local_steps=2, rounds=2, eval_every=2)
    data, ds = fa.load_federated(cfg)
    calm = fa.sweep(cfg, {"client_lr": [0.01, 0.05]}, [0], max_parallel=1, data=data,
                    dataset=ds)
    cleared = []
    clear = jax.clear_caches
    monkeypatch.setattr(jax, "clear_caches", lambda: (cleared.append(1), clear())[1])
    limit = runtime.memory_maps()[1]
    monkeypatch.setattr(runtime, "memory_maps", lambda: (limit, limit))  # at the limit
    crowded = fa.sweep(cfg, {"client_lr": [0.01, 0.05]}, [0], max_parallel=1, data=data,
                       dataset=ds)
    assert cleared  # dropped before the sweep's programs were compiled
    for a, b in zip(calm.rows, crowded.rows, strict=True):  # and nothing changed
        assert a["final"] == b["final"]
