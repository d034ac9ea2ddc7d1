"""The floor of a DivFL round on this CPU against the round's measured time (LeNet-5, MNIST,
the selection tables' paper-literal setting, `papers/selection/specs.py`).

What one DivFL round must compute there (Balakrishnan et al., ICLR 2022, as the SubTrunc /
UnionFL paper runs it: fresh full-data gradients of every client at the current model before
every selection, `feature_refresh = 1`, `selector_features = grad`):

  * **gradient features**: the gradient of every client's loss over all its train rows at
    the new global model (100 clients, 6,000 rows in all): forward and backward of LeNet-5
    on every row, the kernel gradients summed per client;
  * **cohort training**: the local SGD of the cohort (10 clients x 10 steps x 32 rows), the
    same forward and backward on every step's rows;
  * **distances**: the greedy's distances between the clients' feature vectors (p = 61,706
    entries each), at least one Gram matrix [100, p] x [p, 100].

Every layer of the forward and backward is a matrix product (a convolution with k = kh kw
C_in taps, O filters and P output pixels per row as im2col): forward [nP, k] x [k, O], kernel
gradient [k, nP] x [nP, O], input gradient [nP, O] x [O, k] (none for the first layer, whose
input is the data); a dense layer [n, i] x [i, o] and its two gradients. The **floor** is the
time of these products alone, each at the best throughput measured for its shapes on this
CPU: every product is timed on random operands of one instance's exact sizes (features: one
client's n = 60 rows, the mean, 100 instances; training: n = 32 rows, 100 client steps),
kept in the caches (the same operands every call, as a round's freshly computed operands
are), in each form XLA offers for it (`dot_general` in the row and the transposed
orientation; for the convolutions also `lax.conv_general_dilated` and its gradients), each in this
process (XLA's threads on every core) and in a child process pinned to one core (alone, a
small product split over two threads costs more CPU time than on one), the cost of an empty
call subtracted; a product's floor is its fastest form's process CPU time times its
instances. The floor of the round is their sum in CPU seconds, and that spread
perfectly over the cores as wall seconds. Everything else a round runs (im2col copies,
activations, pooling, the loss, the gather of the rows, the update, the greedy's
bookkeeping) counts as zero. A second, stricter line divides the FLOPs by the best
dense-matmul throughput measured ([1024, 1024] x [1024, 1024] `jnp.dot`).

The round is the program a run executes: the driver's chunk (`run.driver.make_chunk`, a
`lax.scan` of `--rounds` DivFL rounds) from the state after `init`, in the layout a run of
the setting takes (`--cpu-devices`, default the automatic one: on 2 cores the CPU split
into 2 devices, the cohort's 10 clients 5 per device and the 100 clients of the feature
pass 50 per device), timed `--repeats` times; beside it the feature pass alone (the
selector's all-client refresh, `Selector.update`) and a Random-selector round (the
cohort's training and the server step, no features). The greedy and the rest of the round
are the round less those two.

    python benchmarks/divfl_floor.py --repeats 5 [--profile] [--levers] [--top-ops 12]

Appends a table to benchmarks/RESULTS.md (`--no-append`: print only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import append_results, write_json  # noqa: E402

SELECTION_SEED = 0

# LeNet-5 on 28 x 28 x 1 (SAME padding on the first convolution): (name, kind, per-row
# geometry). conv: (pixels P of its output per row, taps k = kh kw C_in, filters O, input
# [H, W, C_in], kernel (kh, kw), padding); dense: (inputs, outputs).
LAYERS = (("conv1", "conv", (28 * 28, 25, 6, (28, 28, 1), (5, 5), "SAME")),
          ("conv2", "conv", (10 * 10, 150, 16, (14, 14, 6), (5, 5), "VALID")),
          ("fc1", "dense", (400, 120)), ("fc2", "dense", (120, 84)), ("fc3", "dense", (84, 10)))


def products(n: int) -> list[dict]:
    """The matrix products of one forward and backward of LeNet-5 on n rows: per layer the
    forward, the kernel gradient and (all but the first layer) the input gradient, each as
    (m, k, n) of an [m, k] x [k, n] product with its FLOPs 2 m k n."""
    out = []
    for i, (name, kind, g) in enumerate(LAYERS):
        if kind == "conv":
            p, taps, o = g[0], g[1], g[2]
            shapes = {"forward": (n * p, taps, o), "kernel gradient": (taps, n * p, o),
                      "input gradient": (n * p, o, taps)}
        else:
            a, b = g
            shapes = {"forward": (n, a, b), "kernel gradient": (a, n, b),
                      "input gradient": (n, b, a)}
        for what, (m, k, nn) in shapes.items():
            if what == "input gradient" and i == 0:
                continue  # the data needs no gradient
            out.append({"layer": name, "kind": kind, "product": what, "rows": n,
                        "mkn": (m, k, nn), "flops": 2.0 * m * k * nn})
    return out


def round_products(clients: int, rows: int, cohort: int, steps: int, batch: int,
                   params: int) -> dict[str, dict]:
    """What a DivFL round needs, by part: {part: {"instances", "products"}}; `rows` is the
    total of the clients' train rows (each instance one client's mean share)."""
    return {"gradient features": {"instances": clients,
                                  "products": products(rows // clients)},
            "cohort training": {"instances": cohort * steps, "products": products(batch)},
            "distances": {"instances": 1,
                          "products": [{"layer": "features", "kind": "dense",
                                        "product": "Gram matrix", "rows": clients,
                                        "mkn": (clients, params, clients),
                                        "flops": 2.0 * clients * params * clients}]}}


def part_flops(part: dict) -> float:
    return part["instances"] * sum(p["flops"] for p in part["products"])


# ------------------------------------------------------------------------- timing (JAX)

# A timed loop lasts at least this long: Linux adds a thread's CPU time to the process's
# clock when it is switched out or at a scheduler tick (1-4 ms), so a loop of a few ms can
# miss most of the time XLA's threads spent on the other core (measured here: an fc1 kernel
# gradient at 9 us of CPU per call in a 5 ms loop, 120 us in loops of 10 ms to 0.4 s).
LOOP_S = 0.25


def _best_time(fn, args, repeats: int, calls: int = 0) -> tuple[float, float]:
    """(best wall, best process CPU) seconds per call of jit(fn)(*args): `repeats` timed
    loops of `calls` calls each (0: as many as last at least `LOOP_S`), the same operands
    every call (so they stay in the caches, as a round's freshly computed operands are)."""
    import jax

    c = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(c(*args))
    if calls <= 0:
        t = time.perf_counter()
        jax.block_until_ready(c(*args))
        calls = max(3, int(LOOP_S / max(time.perf_counter() - t, 1e-7)))
    wall = cpu = float("inf")
    for _ in range(repeats):
        t, p = time.perf_counter(), time.process_time()
        for _ in range(calls):
            out = c(*args)
        jax.block_until_ready(out)
        wall = min(wall, (time.perf_counter() - t) / calls)
        cpu = min(cpu, (time.process_time() - p) / calls)
    return wall, cpu


def call_overhead(repeats: int) -> tuple[float, float]:
    """(wall, CPU) seconds of a call of a compiled program that does almost nothing (a
    scalar add): the dispatch cost every timed product carries, subtracted from them."""
    import jax.numpy as jnp

    return _best_time(lambda a: a + 1.0, (jnp.float32(1.0),), repeats)


def conv_program(prod: dict, geometry: tuple):
    """(fn, args): a convolution product by `lax.conv_general_dilated` (forward) or its
    transpose (`jax.vjp`: the kernel or the input gradient), NHWC / HWIO."""
    import jax

    _, _, o, (h, w, ci), (kh, kw), pad = geometry
    x = jax.random.normal(jax.random.key(0), (prod["rows"], h, w, ci))
    k = jax.random.normal(jax.random.key(1), (kh, kw, ci, o))

    def conv(xi, ki):
        return jax.lax.conv_general_dilated(xi, ki, (1, 1), pad,
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    g = jax.random.normal(jax.random.key(2), jax.eval_shape(conv, x, k).shape)
    if prod["product"] == "forward":
        return conv, (x, k)
    if prod["product"] == "kernel gradient":
        return (lambda x, g, k: jax.vjp(lambda kk: conv(x, kk), k)[1](g)[0]), (x, g, k)
    return (lambda x, g, k: jax.vjp(lambda xx: conv(xx, k), x)[1](g)[0]), (x, g, k)


def time_product(prod: dict, repeats: int, geometry: tuple | None,
                 overhead: tuple[float, float]) -> dict[str, dict[str, float]]:
    """Seconds (wall and process CPU) of one instance of a product in each form, the call
    overhead subtracted: `dot_general` [m, k] x [k, n] ("dot"), its transposed orientation
    [n, k] x [k, m] ("dot^T"), and for a convolution (`geometry` given)
    `lax.conv_general_dilated` or its gradient ("conv")."""
    import jax

    m, k, n = prod["mkn"]
    row = (((1,), (0,)), ((), ()))  # [m, k] x [k, n]
    progs = {}
    for form, (p, q) in (("dot", ((m, k), (k, n))), ("dot^T", ((n, k), (k, m)))):
        progs[form] = (lambda a, b: jax.lax.dot_general(a, b, row),
                       (jax.random.normal(jax.random.key(0), p),
                        jax.random.normal(jax.random.key(1), q)))
    if geometry is not None:
        progs["conv"] = conv_program(prod, geometry)
    out = {}
    for form, (fn, args) in progs.items():
        w, u = _best_time(fn, args, repeats)
        out[form] = {"wall": max(w - overhead[0], 0.0), "cpu": max(u - overhead[1], 0.0)}
    return out


ONE_CORE = " (1 core)"  # the forms' names when timed in a process pinned to one core


def product_times(need: dict, repeats: int) -> tuple[dict, tuple[float, float]]:
    """(part -> [each product's `time_product`], the call overhead) for `need`."""
    convs = {name: g for name, kind, g in LAYERS if kind == "conv"}
    overhead = call_overhead(repeats)
    return {part: [time_product(p, repeats, convs.get(p["layer"]), overhead)
                   for p in spec["products"]] for part, spec in need.items()}, overhead


def one_core_times(need: dict, repeats: int) -> dict:
    """`product_times` in a child process pinned to one core: a product alone on the CPU,
    XLA splits it over both cores' threads, and their coordination costs CPU time (an fc1
    forward: 0.11 ms of CPU on 2 cores against 0.07 on one); the floor takes the faster."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "need.json", Path(tmp) / "times.json"
        write_json(src, need)
        subprocess.run([sys.executable, os.path.abspath(__file__), "--one-core-products",
                        str(src), str(dst), "--repeats", str(repeats)], check=True)
        import json
        times = json.loads(dst.read_text())
    return {part: [{f + ONE_CORE: v for f, v in t.items()} for t in ts]
            for part, ts in times.items()}


def peak_dot(repeats: int, n: int = 1024) -> tuple[float, float]:
    """(FLOP/s per wall second, per process CPU second) of an [n, n] x [n, n] `jnp.dot`,
    the best of `repeats` loops (every thread XLA uses)."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n))
    wall, cpu = _best_time(jnp.dot, (a, a), repeats)
    return 2.0 * n ** 3 / wall, 2.0 * n ** 3 / cpu


# ------------------------------------------------------------------------- the round

def setting(rounds: int):
    """(cfg, hp) of the selection tables' DivFL run on MNIST (seed 0)."""
    from fedjax_appeal import HParams, RunConfig
    from papers.selection.specs import BASE_HP, LAMBDA, SCHEDULE, SETTING

    cfg = RunConfig(**{"dataset": "mnist", **SETTING, **SCHEDULE[False], "rounds": rounds,
                       "seed": SELECTION_SEED, "selector": "divfl"})
    return cfg, HParams(**{**BASE_HP, "subtrunc_lambda": LAMBDA["mnist"]})


def _timed(c, args, repeats: int, per: int = 1) -> tuple[float, float, float]:
    """(best wall, median wall, best process CPU) seconds of `repeats` calls of the
    compiled `c(*args)`, divided by `per`."""
    import jax

    jax.block_until_ready(c(*args))
    walls, cpus = [], []
    for _ in range(repeats):
        t, p = time.perf_counter(), time.process_time()
        jax.block_until_ready(c(*args))
        walls.append((time.perf_counter() - t) / per)
        cpus.append((time.process_time() - p) / per)
    return min(walls), statistics.median(walls), min(cpus)


def time_round(selector: str, rounds: int, repeats: int) -> dict:
    """Seconds per round (wall and process CPU) of the driver's chunk of `rounds` rounds
    with `selector`, in the run's layout (mesh and all), and for DivFL the all-client
    feature pass alone; plus the run's sizes."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from fedjax_appeal.core.fields import mentioning
    from fedjax_appeal.run.driver import make_chunk
    from fedjax_appeal.select import selectors

    run = assembled(selector, rounds)
    alg, model, data, state, hp, cfg, layout, mesh = run
    args = (state, data, jax.random.key(cfg.seed), hp, jnp.arange(rounds))
    with scope(mesh):
        c = jax.jit(make_chunk(alg)).lower(*args).compile()
    wall, median, cpu = _timed(c, args, repeats, rounds)
    out = {"selector": selector, "wall": wall, "wall_median": median, "cpu": cpu,
           "layout": layout.describe(), "conv_impl": model.module.conv_impl,
           "clients": data.num_clients, "rows": int(data.train.num_samples),
           "max_rows": int(data.train.max_count), "cohort": cfg.cohort,
           "steps": cfg.local_steps, "batch": cfg.batch_size,
           "params": int(sum(np.size(a) for a in jax.tree.leaves(state.params)))}
    if selector == "divfl":
        sel = selectors.make_selector(model, cfg.view(
            (*selectors.OPTIONS, *mentioning("selector")), "selector"))
        idx = jnp.arange(cfg.cohort)
        valid = jnp.ones((cfg.cohort,), bool)
        f = jax.jit(lambda s, d, h: sel.update(s, None, idx, valid, d, h).selector)
        fargs = (state, data, hp)
        with scope(mesh):
            f = f.lower(*fargs).compile()
        out["features_wall"], _, out["features_cpu"] = _timed(f, fargs, repeats)
    return out


def assembled(selector: str, rounds: int):
    """(alg, model, data, state after init, hp as arrays, cfg, layout, mesh) of the
    setting, in the layout a run of it takes (`run.experiment.run_layout`; the mesh over
    the CPU devices `split` made, data and hyperparameters replicated over it, as the
    driver places them)."""
    import jax

    from fedjax_appeal.core.config import RunConfig
    from fedjax_appeal.execute.distributed import make_mesh, replicate
    from fedjax_appeal.run.assemble import assemble
    from fedjax_appeal.run.experiment import run_layout

    cfg, hp = setting(rounds)
    cfg, layout = run_layout(RunConfig(**{**cfg.as_dict(), "selector": selector}))
    mesh = make_mesh(cfg.devices)
    alg, model, data, _, _ = assemble(cfg, mesh=mesh)
    hp = hp.as_arrays()
    if mesh is not None:
        data, hp = replicate((data, hp), mesh)
    with scope(mesh):
        state = jax.jit(alg.init)(jax.random.key(cfg.seed), data, hp)
    return alg, model, data, state, hp, cfg, layout, mesh


def scope(mesh):
    """The context the driver traces a run's programs in (`run.driver.Driver._scope`):
    under its mesh, so that passes over all clients spread them over the devices."""
    import contextlib

    import jax

    return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)


def split(devices: int | None) -> int:
    """Split the CPU into `devices` JAX devices (None: as a run of the setting does, the
    automatic layout's `execute.layout.auto_split` for its cohort) before JAX runs;
    returns the devices made (0: one)."""
    from fedjax_appeal.execute.distributed import split_cpu
    from fedjax_appeal.execute.layout import auto_split
    from papers.selection.specs import SETTING

    if devices is None:
        return auto_split(SETTING["cohort"])
    split_cpu(devices)
    return devices


def trace_ops(c, args, calls: int = 2) -> tuple[dict, list]:
    """Per operation of the compiled program `c`: (seconds per call, from a
    `jax.profiler` trace of `calls` calls, by the XLA:CPU threads' events) and the spans
    [(start_ns, end_ns, thread)] of every operation."""
    import collections
    import glob
    import tempfile

    import jax

    jax.block_until_ready(c(*args))
    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp)
        for _ in range(calls):
            jax.block_until_ready(c(*args))
        jax.profiler.stop_trace()
        data = jax.profiler.ProfileData.from_file(
            glob.glob(f"{tmp}/**/*.xplane.pb", recursive=True)[0])
    ns, spans = collections.Counter(), []
    for plane in data.planes:
        for line in plane.lines:
            if "XLAEigen" not in line.name:  # the threads that run the program's kernels
                continue
            for ev in line.events:
                if ev.name.startswith(("ThunkExecutor", "end:", "SlinkyThreadPool")):
                    continue
                ns[ev.name] += ev.duration_ns
                spans.append((ev.start_ns, ev.start_ns + ev.duration_ns, line.name))
    return {k: v / 1e9 / calls for k, v in ns.items()}, spans


def concurrent_s(spans: list) -> float:
    """Seconds during which operations of two or more threads ran at the same time."""
    import collections

    edges = sorted([(a, 1, t) for a, _, t in spans] + [(b, -1, t) for _, b, t in spans])
    active, last, both = collections.Counter(), None, 0
    for x, d, t in edges:
        if last is not None and sum(v > 0 for v in active.values()) >= 2:
            both += x - last
        active[t] += d
        last = x
    return both / 1e9


def op_kinds(hlo: str) -> dict[str, tuple[str, str]]:
    """Operation name -> (kind, part) from the compiled HLO text: kind "product" for a
    dot or a fusion that computes one, else "other"; part from the JAX source of its
    metadata: "cohort training" (under the cohort's vmap), "gradient features" (the
    model's forward and backward outside it: the selector's per-client gradients) or "rest"
    (the greedy, the accumulation of the features, the server step)."""
    import re

    comps, name, out = {}, None, {}
    for line in hlo.splitlines():
        head = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if head:
            name = head[1]
            comps[name] = []
        elif name is not None:
            comps[name].append(line)
    for lines in comps.values():
        for line in lines:
            hit = re.match(r"\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*\S+\s+([\w\-]+)\(", line)
            if not hit:
                continue
            called = re.search(r"calls=%?([\w.\-]+)", line)
            dot = hit[2] == "dot" or (called is not None and any(
                " dot(" in x for x in comps.get(called[1], ())))
            src = re.search(r'op_name="([^"]*)"', line)
            src = src[1] if src else ""
            part = ("cohort training" if "vmap()" in src else "gradient features"
                    if "jvp(" in src or "transpose(" in src else "rest")
            out[hit[1]] = ("product" if dot else "other", part)
    return out


def profile_round(repeats: int) -> dict:
    """Where the DivFL round's time goes: operation time (trace) by part and kind."""
    import collections

    import jax
    import jax.numpy as jnp

    from fedjax_appeal.run.driver import make_chunk

    alg, model, data, state, hp, cfg, _, mesh = assembled("divfl", 1)
    args = (state, data, jax.random.key(cfg.seed), hp, jnp.arange(1))
    with scope(mesh):
        c = jax.jit(make_chunk(alg)).lower(*args).compile()
    secs, _ = trace_ops(c, args, calls=max(1, min(repeats, 3)))
    kinds = op_kinds(c.as_text())
    table = collections.Counter()
    for op, t in secs.items():
        table[kinds.get(op, ("other", "rest"))] += t
    return {f"{part} / {kind}": t for (kind, part), t in sorted(table.items())}


def op_lines(hlo: str) -> dict[str, dict]:
    """Operation name -> its opcode, output shape and JAX source (the metadata's op_name)
    from the compiled HLO text."""
    import re

    out = {}
    for line in hlo.splitlines():
        hit = re.match(r"\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\S+)\s+([\w\-]+)\(", line)
        if hit:
            src = re.search(r'op_name="([^"]*)"', line)
            out[hit[1]] = {"opcode": hit[3], "shape": hit[2], "source": src[1] if src else ""}
    return out


def feature_ops(repeats: int, top: int) -> list[dict]:
    """The `top` slowest operations of the feature pass on one device (the selector's
    loops, one client per step, `select.selectors.client_grads`): seconds per pass on
    XLA:CPU's threads (a `jax.profiler` trace), share of all operations, opcode, output
    shape and the JAX source it came from."""
    import jax
    import jax.numpy as jnp

    from fedjax_appeal.select.selectors import client_grads, flatten

    _, model, data, state, _, _, _, _ = assembled("divfl", 1)
    data, state = jax.device_put((data, state), jax.devices()[0])
    ids = jnp.arange(data.num_clients)
    shared = (state.params, state.model_state, data.train)
    c = jax.jit(lambda: client_grads(model, ids, shared, lambda loss, g, _: (flatten(g), loss))
                ).lower().compile()
    secs, _ = trace_ops(c, (), calls=max(1, min(repeats, 3)))
    info = op_lines(c.as_text())
    total = sum(secs.values())
    rows = []
    for op, t in sorted(secs.items(), key=lambda kv: -kv[1])[:top]:
        i = info.get(op, {"opcode": "", "shape": "", "source": ""})
        src = i["source"].split("closed_call/")[-1]  # past the loops' nesting
        rows.append({"op": op, "seconds": t, "share": t / total, **i, "source": src})
    return rows


def levers(repeats: int) -> list[dict]:
    """The feature pass on one device in other forms, each against the selector's loop
    (one client per loop step, im2col in channels-first form): clients batched into one vmap
    (10 per step, or all 100), the row-form im2col and XLA's convolution, and the clients
    as two independent loops (do XLA:CPU's threads run them at once?). Process CPU and
    wall seconds, and whether the features equal the selector's bit for bit."""
    import dataclasses

    import jax
    import jax.numpy as jnp
    import numpy as np

    from fedjax_appeal.select.selectors import client_grad, client_grads, flatten, tail_sizes

    _, model, data, state, _, _, _, _ = assembled("divfl", 1)
    data, state = jax.device_put((data, state), jax.devices()[0])  # one device's forms
    ids = jnp.arange(data.num_clients)
    grad = model.for_grad()
    shared = (state.params, state.model_state, data.train)
    whole = len(tail_sizes(min(256, data.train.max_count)))  # every client at the chunk

    def loop(m, ks):  # the selector's loops
        return client_grads(m, ks, shared, lambda loss, g, _: (flatten(g), loss))

    def one(k):  # a vmap runs its clients at one row count: the largest
        loss, g = client_grad(grad, *shared, k, tail=whole)
        return flatten(g), loss

    def loops(s):
        cut = [i * len(ids) // s for i in range(s + 1)]
        parts = [loop(grad, ids[lo:hi]) for lo, hi in zip(cut[:-1], cut[1:], strict=True)]
        return jax.tree.map(lambda *p: jnp.concatenate(p), *parts)

    forms = {
        "one client per step (the selector's loops)": lambda: loop(grad, ids),
        "10 clients per step (vmap)": lambda: jax.lax.map(one, ids, batch_size=10),
        "all 100 clients in one vmap": lambda: jax.vmap(one)(ids),
        "row-form im2col (patches)": lambda: loop(dataclasses.replace(
            model, module=model.module.clone(conv_impl="patches")), ids),
        "XLA convolution (xla)": lambda: loop(dataclasses.replace(
            model, module=model.module.clone(conv_impl="xla")), ids),
        "two independent loops": lambda: loops(2),
    }
    rows, ref = [], None
    for name, fn in forms.items():
        c = jax.jit(fn).lower().compile()
        wall, _, cpu = _timed(c, (), repeats)
        out = jax.device_get(c())
        ref = out if ref is None else ref
        row = {"form": name, "wall": wall, "cpu": cpu, "same": all(
            np.array_equal(a, b) for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref),
                                                 strict=True))}
        if name == "two independent loops":
            _, spans = trace_ops(c, (), calls=1)
            row["both_threads_s"] = concurrent_s(spans)
            row["span_s"] = (max(b for _, b, _ in spans) - min(a for a, _, _ in spans)) / 1e9
        rows.append(row)
    return rows


# ------------------------------------------------------------------------- report

def floor_rows(need: dict, times: dict, cores: int) -> list[dict]:
    """Per part: FLOPs and the floor: the sum over its products of their fastest form's
    process CPU time per instance, times the instances (`cpu`), and that spread evenly
    over the cores (`wall`)."""
    rows = []
    for part, spec in need.items():
        cpu = spec["instances"] * sum(min(f["cpu"] for f in t.values()) for t in times[part])
        rows.append({"part": part, "flops": part_flops(spec), "cpu": cpu, "wall": cpu / cores})
    return rows


def table(rows: list[dict], peak: float, divfl: dict, rnd: dict, cores: int) -> str:
    flops = sum(r["flops"] for r in rows)
    wall = sum(r["wall"] for r in rows)
    cpu = sum(r["cpu"] for r in rows)
    lines = [f"| part | GFLOP per round | floor, s: products' CPU time; over {cores} cores "
             f"(GFLOP/s) | measured, s: process CPU; wall | measured / floor: CPU; wall |",
             "|---|---|---|---|---|"]
    rest = [divfl[k] - divfl[f"features_{k}"] - rnd[k] for k in ("cpu", "wall")]
    measured = {"gradient features": (divfl.get("features_cpu"), divfl.get("features_wall")),
                "cohort training": (rnd["cpu"], rnd["wall"]), "distances": rest}
    names = {"distances": "distances (measured: the round less the other two: the greedy "
                          "and the rest)"}
    for r in rows:
        mc, mw = measured.get(r["part"], (None, None))
        lines.append(f"| {names.get(r['part'], r['part'])} | {r['flops'] / 1e9:.2f} | "
                     f"{r['cpu']:.3f}; {r['wall']:.3f} "
                     f"({r['flops'] / r['wall'] / 1e9:.1f}) | "
                     + (f"{mc:.3f}; {mw:.3f} | {mc / r['cpu']:.2f}×; {mw / r['wall']:.2f}× |"
                        if mc else "— | — |"))
    lines.append(f"| **DivFL round** | **{flops / 1e9:.2f}** | **{cpu:.3f}; {wall:.3f}** "
                 f"({flops / wall / 1e9:.1f}) | **{divfl['cpu']:.3f}; {divfl['wall']:.3f}** "
                 f"(wall median {divfl['wall_median']:.3f}) | **{divfl['cpu'] / cpu:.2f}×; "
                 f"{divfl['wall'] / wall:.2f}×** |")
    lines.append(f"| the round's FLOPs at the dense-matmul peak ({peak[1] / 1e9:.1f} "
                 f"GFLOP/s per CPU second) | {flops / 1e9:.2f} | {flops / peak[1]:.3f}; "
                 f"{flops / peak[1] / cores:.3f} | {divfl['cpu']:.3f}; {divfl['wall']:.3f} | "
                 f"{divfl['cpu'] * peak[1] / flops:.2f}×; "
                 f"{divfl['wall'] * peak[1] * cores / flops:.2f}× |")
    return "\n".join(lines)


def products_table(need: dict, times: dict) -> str:
    lines = ["| part | layer | product | m × k × n (per instance) | instances | GFLOP | "
             "CPU ms per instance: dot / dot^T / conv; the same on one core | "
             "best GFLOP/s (CPU) |",
             "|---|---|---|---|---|---|---|---|"]
    for part, spec in need.items():
        for prod, t in zip(spec["products"], times[part], strict=True):
            m, k, n = prod["mkn"]
            ms = "; ".join(" / ".join(f"{1e3 * t[f + tag]['cpu']:.3f}" if f + tag in t
                                      else "—" for f in ("dot", "dot^T", "conv"))
                           for tag in ("", ONE_CORE))
            best = min(v["cpu"] for v in t.values())
            rate = f"{prod['flops'] / best / 1e9:.1f}" if best > 0 else "—"
            lines.append(f"| {part} | {prod['layer']} | {prod['product']} | {m} × {k} × {n} | "
                         f"{spec['instances']} | {prod['flops'] * spec['instances'] / 1e9:.3f} "
                         f"| {ms} | {rate} |")
    return "\n".join(lines)


def profile_table(prof: dict) -> str:
    total = sum(prof.values())
    lines = ["| part / kind of operation | seconds per round (trace) | share |", "|---|---|---|"]
    for k, t in sorted(prof.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {k} | {t:.3f} | {t / total:.0%} |")
    lines.append(f"| all operations | {total:.3f} | 100% |")
    return "\n".join(lines)


def ops_table(rows: list[dict]) -> str:
    lines = ["| operation | opcode | output | JAX source | ms per pass (trace) | share |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['op']} | {r['opcode']} | `{r['shape']}` | `{r['source']}` | "
                     f"{1e3 * r['seconds']:.1f} | {r['share']:.1%} |")
    return "\n".join(lines)


def levers_table(rows: list[dict]) -> str:
    lines = ["| gradient features of all clients, as | process CPU, s | wall, s | features "
             "equal bit for bit |", "|---|---|---|---|"]
    for r in rows:
        extra = ""
        if "both_threads_s" in r:
            extra = (f" (two threads busy at once {r['both_threads_s']:.3f} s of a "
                     f"{r['span_s']:.3f} s pass)")
        lines.append(f"| {r['form']}{extra} | {r['cpu']:.3f} | {r['wall']:.3f} | "
                     f"{'yes' if r['same'] else 'no'} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed loops of each program")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per timed chunk")
    ap.add_argument("--profile", action="store_true",
                    help="also trace one DivFL round: operation time by part and kind")
    ap.add_argument("--levers", action="store_true",
                    help="also time the feature pass in other forms (batched clients, "
                         "other convolutions, two independent loops)")
    ap.add_argument("--top-ops", type=int, default=0, metavar="N",
                    help="also trace the feature pass on one device and list its N slowest "
                         "operations (opcode, output shape, JAX source)")
    ap.add_argument("--cpu-devices", type=int, default=None,
                    help="split the CPU into this many JAX devices (default: as a run of the "
                         "setting does, the automatic layout's split; 0 = one device)")
    ap.add_argument("--no-append", action="store_true", help="print only")
    ap.add_argument("--json", default="", help="also write the measurements to this file")
    ap.add_argument("--one-core-products", nargs=2, metavar=("NEED", "OUT"),
                    help=argparse.SUPPRESS)  # the child of `one_core_times`
    args = ap.parse_args(argv)
    if args.one_core_products:
        import json
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # before JAX starts
        need = json.loads(Path(args.one_core_products[0]).read_text())
        write_json(Path(args.one_core_products[1]), product_times(need, args.repeats)[0])
        return None

    split(args.cpu_devices)  # before JAX's first operation

    import jax

    cores = len(os.sched_getaffinity(0))
    load0 = os.getloadavg()[0]
    divfl = time_round("divfl", args.rounds, args.repeats)
    rnd = time_round("random", args.rounds, args.repeats)
    need = round_products(divfl["clients"], divfl["rows"], divfl["cohort"], divfl["steps"],
                          divfl["batch"], divfl["params"])
    times, overhead = product_times(need, args.repeats)
    pinned = one_core_times(need, args.repeats)
    times = {part: [{**t, **u} for t, u in zip(times[part], pinned[part], strict=True)]
             for part in times}
    peak = peak_dot(args.repeats)
    again = time_round("divfl", args.rounds, args.repeats)  # after the products: the better
    for k in ("wall", "wall_median", "cpu", "features_wall", "features_cpu"):
        divfl[k] = min(divfl[k], again[k])
    rows = floor_rows(need, times, cores)
    text = table(rows, peak, divfl, rnd, cores) + "\n\n" + products_table(need, times)
    prof = profile_round(args.repeats) if args.profile else None
    lev = levers(args.repeats) if args.levers else None
    ops = feature_ops(args.repeats, args.top_ops) if args.top_ops else None
    if prof:
        text += "\n\n" + profile_table(prof)
    if lev:
        text += "\n\n" + levers_table(lev)
    if ops:
        text += "\n\n" + ops_table(ops)
    print(text)
    if args.json:
        write_json(Path(args.json), {"rows": rows, "peak_dot": peak, "divfl": divfl,
                                     "random": rnd, "times": times, "need": need,
                                     "overhead": overhead, "load_start": load0,
                                     "profile": prof, "levers": lev, "ops": ops})
    if not args.no_append:
        notes = (
            f"Setting: the selection tables' paper-literal DivFL run on MNIST (seed "
            f"{SELECTION_SEED}): {divfl['clients']} clients, {divfl['rows']} train rows "
            f"(largest client {divfl['max_rows']}), cohort {divfl['cohort']} x "
            f"{divfl['steps']} steps x {divfl['batch']} rows, every client's full-data "
            f"gradient refreshed every round, {divfl['params']} parameters; "
            f"{divfl['layout']}, conv {divfl['conv_impl']}, jax {jax.__version__}; load "
            f"average {load0:.1f} at the start. Floor: each product of the round timed alone "
            f"on random operands of one instance's sizes (best of {args.repeats} loops of at "
            f"least 3 calls and {LOOP_S:g} s, the same operands each call, the cost of an "
            f"empty call "
            f"subtracted: {1e6 * overhead[1]:.0f} µs CPU), in each XLA form (dot_general in "
            f"the row and the transposed orientation, lax.conv and its gradients for the "
            f"convolutions), in this process and in one pinned to one core; a "
            f"part's floor is the sum over its products of the fastest form's process CPU "
            f"time times the instances, and that over {cores} cores as a perfectly parallel "
            f"wall time; nothing else of the round counts. Measured: the driver's chunk of "
            f"{args.rounds} rounds, best of {args.repeats} calls, per round (twice, before "
            f"and after the products: the better); gradient features: the selector's "
            f"all-client refresh alone; cohort training: a Random-selector round (its "
            f"training, aggregation and server step). Dense-matmul line: the round's FLOPs at the "
            f"best [1024, 1024] jnp.dot throughput per process CPU second (every thread XLA "
            f"uses: {peak[0] / 1e9:.1f} GFLOP/s per wall second in this run).")
        if prof:
            notes += (" Profile: one DivFL round's operations from a jax.profiler trace (their "
                      "durations on XLA:CPU's threads, inflated alike by a loaded machine); "
                      "a product is a dot or a fusion computing one.")
        if lev:
            notes += (" Levers: the feature pass alone in each form, best of "
                      f"{args.repeats} calls; bit-for-bit against the form the selector runs.")
        if ops:
            notes += (" Slowest operations: the feature pass of all clients on one device "
                      "(one client per loop step), traced with jax.profiler; a fusion's "
                      "output shape and JAX source name the layer and pass it belongs to "
                      "(`transpose(jvp(...))`: the backward).")
        append_results(f"DivFL round against its floor (LeNet-5, MNIST, {cores} cores)",
                       text, notes)
    return rows


if __name__ == "__main__":
    from fedjax_appeal.core.errors import ConfigError
    try:
        main()
    except ConfigError as e:  # e.g. no data directory: one line, not a traceback
        hint = ("" if os.environ.get("FEDJAX_APPEAL_DATA") else
                " (this script reads FEDJAX_APPEAL_DATA: the folder holding mnist.npz)")
        sys.exit(f"divfl_floor.py: {e}{hint}")
