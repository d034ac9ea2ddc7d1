"""Several devices: a `Mesh` with one axis `clients` over which the cohort is sharded.

The cohort axis is the natural shard axis. Inside a round (see `executor.Executor.each`),
the cohort's indices, keys and everything the clients send back carry a
`NamedSharding(mesh, P("clients"))` constraint, so each device runs the local updates of
m / D clients; the server state, the hyperparameters and the client data are replicated
(`NamedSharding(mesh, P())`), and XLA inserts the cross-device reductions of the weighted
average. Sweeps may instead place the sweep axis on the mesh (`shard_leading`).

On one device (or `devices=1`) no mesh is made and nothing changes.

Several processes (hosts): `initialize` starts JAX's multi-process runtime
(`jax.distributed.initialize`, CPU collectives over gloo) before anything else touches
JAX; then `jax.devices()` lists the devices of every process and `make_mesh(0)` spans them
all. Every process runs the same program on the same (seeded, identically loaded) data;
`fetch` brings results to the host (gathering arrays that span other processes), and only
the main process (`is_main`) writes files or prints progress.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..core.config import ConfigError

AXIS = "clients"


# Environment variables by which a cluster scheduler announces a multi-process job that
# `jax.distributed.initialize()` can detect by itself (name -> variable holding the size).
CLUSTER_ENVS = {"SLURM": "SLURM_NTASKS", "Open MPI": "OMPI_COMM_WORLD_SIZE"}


def detected_cluster() -> str | None:
    """The scheduler of a multi-process job found in the environment, else None.

    `JAX_COORDINATOR_ADDRESS` (with JAX's own variables) counts too; a job of one task
    (e.g. `SLURM_NTASKS=1`) is a single process and needs no runtime.
    """
    if os.environ.get("JAX_COORDINATOR_ADDRESS"):
        return "JAX_COORDINATOR_ADDRESS"
    for name, var in CLUSTER_ENVS.items():
        try:
            if int(os.environ.get(var, "1")) > 1:
                return name
        except ValueError:
            continue
    return None


def initialize(coordinator_address: str = "", num_processes: int = 0, process_id: int = -1,
               heartbeat_timeout_s: int = 100, initialization_timeout_s: int = 300) -> bool:
    """Start JAX's multi-process runtime if asked for or if a cluster is detected.

    With `coordinator_address` (`HOST:PORT` of process 0), `num_processes` and `process_id`
    given, those are used; with none of them given, `jax.distributed.initialize()`
    detects the cluster itself when `detected_cluster` finds one (SLURM, Open MPI), and a
    plain single-process run changes nothing. On CPU the cross-process collectives use
    gloo. Must run before anything touches a JAX device.

    `heartbeat_timeout_s` bounds how long the survivors of a killed process wait: the
    runtime declares a process dead after that many seconds without a heartbeat and the
    others stop with an error (see `is_peer_failure`).

    Returns:
      True when the runtime was started (several processes), False otherwise.
    """
    given = [bool(coordinator_address), num_processes > 0, process_id >= 0]
    if any(given) and not all(given):
        raise ConfigError("several processes need all three of --coordinator-address "
                          "HOST:PORT, --num-processes N and --process-id I (0 <= I < N)")
    if all(given):
        host, sep, port = coordinator_address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"--coordinator-address {coordinator_address!r}: write HOST:PORT "
                              "of process 0, e.g. 10.0.0.1:12345 (127.0.0.1:PORT on one "
                              "machine)")
        if not 0 <= process_id < num_processes:
            raise ConfigError(f"--process-id {process_id} must lie in 0 .. "
                              f"{num_processes - 1} (--num-processes {num_processes})")
        if num_processes == 1:
            return False
        kw = dict(coordinator_address=coordinator_address, num_processes=num_processes,
                  process_id=process_id)
    elif detected_cluster() is None:
        return False
    else:
        kw = {}
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(**kw, heartbeat_timeout_seconds=heartbeat_timeout_s,
                                   initialization_timeout=initialization_timeout_s)
    except (ValueError, RuntimeError, TypeError) as e:  # incl. JaxRuntimeError (timeouts)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        where = (f"--coordinator-address {coordinator_address}" if coordinator_address else
                 f"the {detected_cluster()} environment")
        raise ConfigError(f"the multi-process runtime did not start from {where} ({first}): "
                          "check that process 0 runs and its port is free, or give "
                          "--coordinator-address, --num-processes and --process-id") from None
    _filter_stderr()
    return True


EXIT_PEER = 3  # exit status of a process that stopped because another one died
ADVICE_TAG = "\x00fedjax-appeal-advice:"  # stderr line read (not shown) by the stderr filter
_stopping = threading.Lock()
_advice: list[str] = []


def set_peer_message(text: str) -> None:
    """The advice printed when another process dies (e.g. where the checkpoint is)."""
    _advice[:] = [text]
    if jax.process_count() > 1:
        print(ADVICE_TAG + text, file=sys.stderr, flush=True)


def stop_for_peer(detail: str) -> None:
    """Print one line and end this process at once (exit status `EXIT_PEER`).

    `os._exit` skips JAX's exit-time shutdown barrier, which would wait for the dead
    process and then abort with a long log; checkpoints are written atomically, so the last
    one on disk is complete.
    """
    if _stopping.acquire(blocking=False):
        advice = _advice[0] if _advice else ""
        line = (f"fedjax-appeal: error: process {jax.process_index()} of "
                f"{jax.process_count()}: another process of this job stopped "
                f"({detail[:160]}); no results written" + (f"; {advice}" if advice else ""))
        sys.stderr.flush()
        # one write() of the whole line: the runtime's C++ threads log to the same fd, and
        # print() would write the text and its newline separately
        os.write(2, (line + "\n").encode())
        sys.stdout.flush()
    os._exit(EXIT_PEER)


def _filter_stderr() -> None:
    """Route this process's stderr through `stderr_filter` (a small helper process).

    When the coordinator process dies, the runtime ends the survivors from a C++ thread
    with a fatal log of many lines, which no Python code can intercept. The helper passes
    every line through until the runtime's first error line, then keeps only this
    program's own lines, and when the process ends that way it prints one line saying
    that another process stopped and where the last checkpoint is.
    """
    sys.stderr.flush()
    original = os.dup(2)
    helper = subprocess.Popen([sys.executable, "-m", "fedjax_appeal.execute.stderr_filter"],
                              stdin=subprocess.PIPE, stdout=original,
                              stderr=subprocess.DEVNULL, close_fds=True)
    os.close(original)
    os.dup2(helper.stdin.fileno(), 2)
    helper.stdin.close()  # fd 2 now holds the pipe; the helper ends when this process does


def is_main() -> bool:
    """True in the process that writes files and prints progress (process 0)."""
    return jax.process_index() == 0


def is_peer_failure(exc: BaseException) -> bool:
    """Whether `exc` is the runtime reporting that another process died or vanished."""
    if jax.process_count() <= 1 or not isinstance(exc, jax.errors.JaxRuntimeError):
        return False
    text = f"{type(exc).__name__} {exc}".lower()
    return any(w in text for w in ("heartbeat", "unavailable", "deadline", "gloo",
                                   "connection", "coordination", "task", "barrier",
                                   "preempt", "shut down", "aborted"))


def fetch(tree):
    """`jax.device_get` that also works for arrays spanning several processes.

    Fully replicated arrays are read from the local copy; arrays sharded over devices of
    other processes are gathered (`multihost_utils.process_allgather`, a collective: every
    process calls `fetch` on the same values in the same order, as SPMD code does).
    """
    def one(a):
        if not isinstance(a, jax.Array) or a.is_fully_addressable:
            return jax.device_get(a)
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(one(jax.random.key_data(a)),
                                            impl=jax.random.key_impl(a))
        if a.is_fully_replicated:
            return np.asarray(a.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(a, tiled=True))

    return jax.tree.map(one, tree)


def split_cpu(n: int) -> None:
    """Make the host CPU appear as `n` JAX devices (`jax_num_cpu_devices`; 0 = leave it).

    XLA:CPU runs a vmapped cohort's small batched matmuls on about one core; with the cohort
    sharded over n CPU devices (`make_mesh`) each device computes its share of the clients
    at once (benchmarks/RESULTS.md: the FedAvg MLP round at cohort 100 on 2 cores). Must run
    before JAX's first operation in the process.
    """
    if n < 0:
        raise ConfigError(f"--cpu-devices must be >= 0 (got {n})")
    if n == 0:
        return
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:
        raise ConfigError("--cpu-devices must be set before JAX runs; in Python call "
                          "jax.config.update('jax_num_cpu_devices', N) right after "
                          "`import jax`") from None


def make_mesh(devices: int = 0) -> Mesh | None:
    """A 1-D mesh over the first `devices` devices (0 = all); None for a single device.

    With several processes the mesh must hold every process's devices (`devices` 0 or
    the global count), since each process computes only on its own devices.
    """
    avail = jax.devices()
    if devices < 0:
        raise ConfigError(f"--devices must be >= 0 (got {devices})")
    if devices == 1:
        return None
    if jax.process_count() > 1 and devices not in (0, len(avail)):
        raise ConfigError(f"--devices {devices} with {jax.process_count()} processes: use "
                          f"--devices 0 (all {len(avail)} devices of every process)")
    if devices > len(avail):
        fix = (f"add --cpu-devices {devices} to split the host CPU into {devices} devices, "
               "or drop --devices and --client-lanes (--layout auto splits the CPU itself)"
               if avail[0].platform == "cpu" else "lower --devices (0 = all)")
        raise ConfigError(f"--devices {devices} but only {len(avail)} {avail[0].platform} "
                          f"device(s) are visible: {fix}")
    n = len(avail) if devices == 0 else devices
    if n <= 1:
        return None
    return Mesh(np.array(avail[:n]), (AXIS,))


def replicate(tree, mesh: Mesh | None):
    """Put every array of `tree` on all devices of the mesh (no-op without a mesh)."""
    if mesh is None:
        return tree
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def shard_leading(tree, mesh: Mesh | None):
    """Split the leading axis of every array of `tree` over the mesh axis `clients`.

    With several processes every process holds the whole (identical) value and places
    the rows of its own devices (`jax.make_array_from_callback`).
    """
    if mesh is None:
        return tree
    spec = NamedSharding(mesh, PartitionSpec(AXIS))
    if jax.process_count() <= 1:
        return jax.device_put(tree, spec)

    def one(a):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(one(jax.random.key_data(a)),
                                            impl=jax.random.key_impl(a))
        host = np.asarray(a)
        return jax.make_array_from_callback(host.shape, spec, lambda idx: host[idx])

    return jax.tree.map(one, tree)


def _in_device_program() -> bool:
    """Inside jit: whether this is one device's program of a `per_device` pass (the mesh
    being traced under has the `clients` axis, manual: the device sees only its share)."""
    mesh = jax.sharding.get_abstract_mesh()
    return (not mesh.empty and AXIS in mesh.axis_names
            and mesh.axis_types[mesh.axis_names.index(AXIS)] == jax.sharding.AxisType.Manual)


def _over_clients() -> bool:
    """Inside jit: whether the mesh being traced under has a `clients` axis for the compiler
    to shard over (not without a mesh, nor inside one device's program)."""
    mesh = jax.sharding.get_abstract_mesh()
    return not mesh.empty and AXIS in mesh.axis_names and not _in_device_program()


def constrain_cohort(tree, mesh: Mesh | None):
    """Inside jit: the leading (cohort) axis of every array is sharded over `clients`
    (nothing inside one device's program of a `per_device` pass)."""
    if mesh is None or _in_device_program():
        return tree
    spec = NamedSharding(mesh, PartitionSpec(AXIS))

    return jax.tree.map(lambda a: a if not hasattr(a, "ndim") or a.ndim == 0
                        else _constrain(a, spec), tree)


def _constrain(a, spec):
    """`with_sharding_constraint` that also takes an array of PRNG keys (via its data)."""
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(
            jax.lax.with_sharding_constraint(jax.random.key_data(a), spec),
            impl=jax.random.key_impl(a))
    return jax.lax.with_sharding_constraint(a, spec)


def spread(rows, axis: int = 1):
    """Inside jit, under a mesh with the `clients` axis (`jax.set_mesh`; the driver traces
    a run with a mesh under it): `rows` sharded along `axis` over that axis's devices, so a
    pass over all clients that loops over groups (`lax.map` over the leading axis) has
    each device compute its share of every group, the data being replicated. Without
    such a mesh (one device, a batch of runs sharding its runs axis, or inside one
    device's program of a `per_device` pass), `rows` as it is.
    """
    if not _over_clients():
        return rows
    spec = PartitionSpec(*([None] * axis), AXIS)
    return jax.tree.map(lambda a: _constrain(a, spec), rows)


def collect(tree):
    """Inside jit, under a mesh with the `clients` axis: every array of `tree` replicated
    over its devices (the results of a `spread` pass, so that what follows sees whole
    arrays, as without a mesh); otherwise `tree` as it is."""
    if not _over_clients():
        return tree
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, PartitionSpec()), tree)


def map_grouped(fns, group, rows, shared=()):
    """Inside jit: `lax.map` of `fns[group(r, shared)](r, shared)` over the leading axis of
    `rows`, with no branch per row: the rows are ordered by group (stably) and each
    function runs in a loop of its own over its group's rows (a dynamic trip count), its
    results written back at the rows' places. Every function must return the same shapes.

    A `lax.switch` per row costs its operands' hand-over on every row (a LeNet-5 client's
    gradient at one of three row counts: 0.16 ms of 3-4 ms per client on XLA:CPU)."""
    n = jax.tree.leaves(rows)[0].shape[0]
    take = lambda i: jax.tree.map(lambda a: a[i], rows)  # noqa: E731
    g = jax.lax.map(lambda r: jnp.asarray(group(r, shared), jnp.int32), rows)
    order = jnp.argsort(g, stable=True)
    ends = jnp.searchsorted(g[order], jnp.arange(len(fns) + 1, dtype=jnp.int32))
    shape = jax.eval_shape(fns[0], take(0), shared)
    out = jax.tree.map(lambda t: jnp.zeros((n, *t.shape), t.dtype), shape)
    for j, fn in enumerate(fns):
        def body(i, out, fn=fn):
            at = order[i]
            y = fn(take(at), shared)
            return jax.tree.map(lambda o, v: jax.lax.dynamic_update_index_in_dim(o, v, at, 0),
                                out, y)
        out = jax.lax.fori_loop(ends[j], ends[j + 1], body, out)
    return out


def map_spread(fn, rows, shared=(), group=None):
    """Inside jit: `lax.map(lambda r: fn(r, shared), rows)` over the leading axis (length
    n), and, under a mesh with the `clients` axis (`jax.set_mesh`), each of its D devices
    mapping over its own ceil(n / D) consecutive rows (the last row repeated to fill the
    shares; the copies are dropped) as a program of its own (`jax.shard_map`, `shared`
    replicated), compiled as on one device; the outputs come back replicated. For passes
    over all clients that run one client at a time (per-client gradients: a vmap would turn
    convolutions into slower grouped ones). `fn` must take every traced value it needs
    that is not a row from `shared`, since each device runs it as a separate program.
    With `group`, `fn` is a sequence of functions and each row runs the one its
    `group(r, shared)` names (`map_grouped`).

    A device's program is the one-device loop over its rows, so every row's result is the
    one device's: a vmap over the sharded device axis instead keeps a device axis of size 1
    in every array, which XLA:CPU compiles to other, slower programs (LeNet-5's gradient
    features of 100 MNIST clients on 2 devices: 1.12 against 0.75 CPU seconds,
    benchmarks/RESULTS.md)."""
    def loop(r, sh):
        if group is None:
            return jax.lax.map(lambda x: fn(x, sh), r)
        return map_grouped(fn, group, r, sh)

    if not _over_clients():
        return loop(rows, shared)
    d = int(jax.sharding.get_abstract_mesh().shape[AXIS])
    n = jax.tree.leaves(rows)[0].shape[0]
    take = jnp.minimum(jnp.arange(d * -(-n // d)), n - 1)
    split = jax.tree.map(lambda a: a[take], rows)
    spec = PartitionSpec(AXIS)
    out = jax.shard_map(loop, in_specs=(spec, PartitionSpec()), out_specs=spec,
                        check_vma=False)(split, shared)
    return collect(jax.tree.map(lambda a: a[:n], out))


# A parameter array at least this large (elements; 1 MiB of float32, a core's L2 cache on
# the CPUs measured) makes `per_device` run each device's clients as a program of its own.
OWN_PROGRAM_MIN_PARAM = 1 << 18


def own_program(params) -> bool:
    """Whether `per_device` should run each device's share as a program of its own
    (`jax.shard_map`) rather than as a vmap over a sharded device axis: when the model has a
    parameter array of at least `OWN_PROGRAM_MIN_PARAM` elements.

    Both compute the same. In the vmap form every array of a device's program keeps a
    device axis of size 1, and XLA:CPU then computes a dense layer's kernel gradient
    transposed and folds the transpose into the SGD update: for a kernel larger than the
    cache that transposing copy costs more than the gradient (`simple_cnn`'s 9216 x 128
    kernel: 4.5 against 0.3 ms per local step), and the CNN rounds of the peer workloads run
    6-17% faster as programs of their own; for small kernels the transposed form is the
    faster product (the FMNIST MLP's 784 x 64: the plain command's round at cohort 100 is
    16% slower as programs of their own). benchmarks/RESULTS.md has both measurements.
    """
    sizes = [a.size for a in jax.tree.leaves(params) if hasattr(a, "size")]
    return max(sizes, default=0) >= OWN_PROGRAM_MIN_PARAM


def per_device(fn, rows, shared, mesh: Mesh, own: bool = False):
    """Inside jit: `fn(share, shared)` once per device of `mesh`, each on its own share.

    Every leaf of `rows` has the same leading axis of length n (a multiple of the D devices
    of `mesh`); device i gets rows [i n / D, (i + 1) n / D) and the whole of `shared`; the
    outputs come back with a leading axis of n, sharded. `own`: each device runs `fn` as a
    program of its own (`jax.shard_map`), compiled as on one device, with no device axis in
    its arrays; otherwise the rows are viewed as [D, n / D] and `fn` is vmapped over the
    sharded outer axis (`own_program` says which is faster for a model).
    """
    if own:
        spec = PartitionSpec(AXIS)
        return jax.shard_map(fn, mesh=mesh, in_specs=(spec, PartitionSpec()), out_specs=spec,
                             check_vma=False)(constrain_cohort(rows, mesh), shared)
    d = int(mesh.devices.size)
    n = jax.tree.leaves(rows)[0].shape[0]
    split = jax.tree.map(lambda a: a.reshape(d, n // d, *a.shape[1:]), rows)
    out = constrain_cohort(jax.vmap(fn, in_axes=(0, None))(constrain_cohort(split, mesh),
                                                          shared), mesh)
    return jax.tree.map(lambda a: a.reshape(n, *a.shape[2:]), out)


def one_vmap(n: int, d: int, lanes: int) -> bool:
    """Whether `over_rows` runs n rows on d devices with `lanes` as one vmap (sharded over
    the devices) rather than `lanes` at a time on each device."""
    return lanes <= 0 or n % d != 0 or lanes >= n // d


def over_rows(fn, rows, lanes: int = 0, mesh: Mesh | None = None, shared=(),
              own: bool = False):
    """Inside jit: `fn(row, shared)` over the leading axis (length n) of every leaf of `rows`.

    lanes <= 0: one vmap over all n rows. lanes > 0: `lanes` rows side by side in a vmap,
    the groups one after another in a `lax.map` inside the same program. With a `mesh` of
    D devices that divide n, each device takes its n / D consecutive rows and runs them
    `lanes` at a time (`per_device`, with `own`); otherwise the vmap is sharded as its
    inputs are. `shared` (any pytree, e.g. the server state and the client data) is the
    same for every row; `fn` must take every traced value it needs that is not a row from
    it, since `per_device` may run `fn` as a separate program on each device.
    """
    n = jax.tree.leaves(rows)[0].shape[0]
    d = 1 if mesh is None else int(mesh.devices.size)
    if one_vmap(n, d, lanes):
        return jax.vmap(fn, in_axes=(0, None))(rows, shared)

    def mapped(share, sh):
        return jax.lax.map(lambda r: fn(r, sh), share, batch_size=lanes if lanes > 1 else None)

    return mapped(rows, shared) if d == 1 else per_device(mapped, rows, shared, mesh, own)


def check_processes(devices: int) -> None:
    """With several processes, the simulation must span them: `--devices 0`."""
    if jax.process_count() > 1 and devices != 0 and devices != len(jax.devices()):
        raise ConfigError(f"--devices {devices} with {jax.process_count()} processes: use "
                          f"--devices 0 (all {len(jax.devices())} devices of every process)")


def agree(ok: bool) -> bool:
    """Process 0's `ok`, known to every process (a broadcast; plain `ok` on one process)."""
    if jax.process_count() <= 1:
        return ok
    return bool(multihost_utils.broadcast_one_to_all(np.int32(ok)))
