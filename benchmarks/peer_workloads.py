"""The peers' own benchmark workloads, timed here: fedjax_appeal against Flower's simulation.

Workloads (`WORKLOADS`), both FedAvg with the small CNN `simple_cnn` (conv3x3 32, conv3x3
64, max-pool, dropout 0.25, FC 128, dropout 0.5; pfl-research's CIFAR-10 `simple_cnn` and
FedJAX's EMNIST conv model are this network):

  * ``cifar10_pfl`` - pfl-research's CIFAR-10 benchmark (`image_classification`,
    baseline config `cifar10_iid`): 1,000 clients x 50 training images (IID, equal sizes),
    50 clients per round, 1 local epoch of batch 10 (= 5 local steps), local lr 0.1,
    server SGD lr 1.0, unweighted average (all clients hold 50 images), evaluation of the
    global model every 10 rounds on 10,000 held-out images. Our CIFAR-10 pool (60,000
    images, decoded from the JPEG file) is split into 1,000 equal IID clients of 60 rows,
    each 50 train / 10 test, so the evaluation covers the same 10,000 rows count.
  * ``femnist_fedjax`` - FedJAX's EMNIST FedAvg example shape on the FEMNIST writers we
    have (`femnist_partial.npz`: 184 writers, 62 classes, natural partition, 90 / 10
    per-writer split as LEAF's): 10 clients per round, batch 10, 1 local epoch, client SGD
    lr 10^-1.5 and server SGD lr 1 (FedJAX's example uses server Adam; SGD keeps both sides
    on the same plain FedAvg), evaluation every 10 rounds on every writer's test rows.
    A client's epoch is ceil(n_k / 10) steps; ours runs a fixed tau per round, the mean of
    that over the writers (so the expected work per round is the same), and the table
    reports both sides' realised local steps per round.

Sides:
  * ours: one jitted `lax.scan` over the `eval_every` rounds between evaluations (the
    cohort vmapped inside), then one jitted evaluation of the test rows; compile time apart.
    Local minibatches are drawn uniformly with replacement (a peer shuffles an epoch; the
    rows of work per client are equal).
  * Flower (`--peer flower`): the program a Flower user writes, run in its own venv
    (`benchmarks/.flower_venv`, git-ignored; `python3 -m venv benchmarks/.flower_venv &&
    benchmarks/.flower_venv/bin/pip install 'flwr[simulation]' 'torch==2.13.0+cpu' numpy`):
    a torch `nn.Sequential` of the same CNN, a `NumPyClient` whose `fit` loads the global
    weights, trains one epoch with a shuffled `DataLoader` and `torch.optim.SGD`, the
    built-in `FedAvg` strategy with a central `evaluate_fn` every 10 rounds, and
    `flwr.simulation.run_simulation` on the Ray backend (one CPU per client actor, torch
    intra-op threads 1 in the actors). Same client arrays (handed over as .npy files). Per-
    round seconds come from the timestamps of the strategy's per-round `evaluate_fn` calls
    (evaluation time subtracted); the first round (Ray actors starting) is reported apart.
    Where JAX runs on a GPU the Flower clients and evaluation run on it too (`--peer-device`),
    once per Ray `num_gpus` per client in `--client-gpus` (default: 1, Flower's tutorial
    setting, and 1 / CPUs); the fastest is compared. `--flower-python` / `--flower-path` run
    Flower with another interpreter where no venv can be made (benchmarks/gpu_peer_workloads.sh).

Reported per workload: s/round of training (min / median over rounds), s per evaluation,
and the time per 100 rounds DERIVED as 100 x median s/round + (100 / eval_every) x median
s/eval; ratio = peer / ours. One run per side, or `--repeats N` interleaved runs (each
workload's two sides, then the next repeat), reported with each repeat's ratio, their
median and minimum and the repeats in which ours was faster (the machine is shared; load
average in the RESULTS.md header).

    python benchmarks/peer_workloads.py --rounds 10 --ours-rounds 2 --peer flower
    python benchmarks/peer_workloads.py --workloads cifar10_pfl --rounds 10 --ours-rounds 3 \
        --program round --local-unroll 0 --peer flower --no-append --out B.json
    python benchmarks/peer_workloads.py --rounds 10 --cpu-devices 2 --client-lanes 1 \
        --peer flower          # ours on both cores: the cohort sharded over 2 CPU devices
    python benchmarks/peer_workloads.py --combine A.json,B.json   # one RESULTS.md section
    python benchmarks/peer_workloads.py --rounds 10 --repeats 3   # 3 interleaved runs per side
    python benchmarks/peer_workloads.py --quick --peer none
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    HERE,
    append_results,
    machine,
    matmul_peak,
    stats,
    step_flops,
    write_json,
)

from fedjax_appeal.algorithms import build  # noqa: E402
from fedjax_appeal.core.config import HParams, RunConfig  # noqa: E402
from fedjax_appeal.core.conv import CONV_IMPLS  # noqa: E402
from fedjax_appeal.core.models import model_for  # noqa: E402
from fedjax_appeal.data import load_federated  # noqa: E402
from fedjax_appeal.data.partition import PARTITIONS  # noqa: E402
from fedjax_appeal.data.pool import register_partition  # noqa: E402
from fedjax_appeal.evaluate.evaluation import evaluate_split  # noqa: E402
from fedjax_appeal.execute.distributed import make_mesh, replicate, split_cpu  # noqa: E402
from fedjax_appeal.execute.executor import Executor  # noqa: E402
from fedjax_appeal.execute.layout import auto_split, conv_impl_for  # noqa: E402
from fedjax_appeal.run.driver import make_chunk, split_key  # noqa: E402

FLOWER_VENV = HERE / ".flower_venv"
FLOWER_INSTALL = ("python3 -m venv benchmarks/.flower_venv && benchmarks/.flower_venv/bin/pip "
                  "install 'flwr[simulation]' 'torch==2.13.0+cpu' numpy")


@dataclasses.dataclass(frozen=True)
class Workload:
    """One peer benchmark workload (see the module docstring)."""

    title: str
    dataset: str
    partition: str
    clients: int
    cohort: int
    batch_size: int
    client_lr: float
    train_fraction: float
    eval_every: int = 10
    min_samples: int = 10
    max_samples: int = 0  # use a random subset of this many pool rows (0 = all)
    max_local_steps: int = 0  # cap on the local steps (0 = one epoch; --quick only)


WORKLOADS = {
    "cifar10_pfl": Workload("pfl-research CIFAR-10 (1000 x 50 images, 50/round, 1 epoch, b=10)",
                            "cifar10", "iid_equal", 1000, 50, 10, 0.1, 50 / 60),
    "femnist_fedjax": Workload("FedJAX EMNIST-style FedAvg on FEMNIST (10/round, 1 epoch, b=10)",
                               "femnist", "natural", 0, 10, 10, 10 ** -1.5, 0.9),
}
# --quick: the same programs on a few clients and rounds (smoke test of the whole path)
QUICK = {"cifar10_pfl": {"clients": 10, "cohort": 2, "eval_every": 1, "max_samples": 600,
                         "max_local_steps": 2},
         "femnist_fedjax": {"clients": 10, "cohort": 2, "eval_every": 1, "max_local_steps": 2}}


def iid_equal(ds, total: int, cfg, rng: np.random.Generator) -> list[np.ndarray]:
    """IID clients of equal size: a random permutation of the rows cut into `total` parts
    of floor(N / total) rows (pfl-research's `cifar10_iid`, constant points per user)."""
    per = len(ds) // total
    if per < 2:
        raise ValueError(f"{len(ds)} rows cannot make {total} clients of 2 or more rows")
    order = rng.permutation(len(ds))[:per * total]
    return [np.sort(order[i * per:(i + 1) * per]) for i in range(total)]


if "iid_equal" not in PARTITIONS:
    register_partition("iid_equal")(iid_equal)


def writers(data_dir: str = "") -> int:
    """Number of FEMNIST writers with at least 10 rows (the natural clients)."""
    from fedjax_appeal.data.partition import natural
    from fedjax_appeal.data.sources import load_femnist

    return len(natural(load_femnist(data_dir or None).groups, 10))


def configure(name: str, quick: bool = False, data_dir: str = "", cache_dir: str = ""
              ) -> tuple[RunConfig, HParams, Workload]:
    """RunConfig and HParams of a workload; local_steps = one epoch (mean over clients)."""
    w = WORKLOADS[name]
    if quick:
        w = dataclasses.replace(w, **QUICK[name])
    clients = w.clients or writers(data_dir)
    cfg = RunConfig(dataset=w.dataset, model="simple_cnn", partition=w.partition,
                    clients=clients, unseen_clients=0, cohort=w.cohort, local_steps=1,
                    batch_size=w.batch_size, train_fraction=w.train_fraction,
                    eval_every=w.eval_every, min_samples=w.min_samples,
                    max_samples=w.max_samples, data_dir=data_dir,
                    cache_dir=cache_dir, aggregation="proportional")
    return cfg, HParams(client_lr=w.client_lr, server_lr=1.0), w


def epoch_steps(count: np.ndarray, batch_size: int) -> np.ndarray:
    """Local steps of one epoch per client: ceil(n_k / b)."""
    return -(-np.asarray(count, np.int64) // batch_size)


def ours(name: str, rounds: int, quick: bool = False, data_dir: str = "",
         cache_dir: str = "", rounds_per_call: int = 1, program: str = "chunk",
         local_unroll: int = 1, conv_impl: str = "auto", devices: int = 1,
         client_lanes: int = 0) -> dict:
    """Time `rounds` rounds of our FedAvg on a workload (evaluation every `eval_every`).

    Each call of the compiled program runs `rounds_per_call` rounds (one `lax.scan` over
    rounds). `program`: ``chunk`` = the library's compiled chunk (`make_chunk`, a scan over
    the rounds of a call, as `simulate` runs it); ``round`` = the algorithm's round jitted
    alone, one call per round (no loop around it). `local_unroll`: `RunConfig.local_unroll`;
    `conv_impl`: `RunConfig.conv_impl` (core/conv.py; auto = pooled_winograd_train on CPU,
    patches_train on GPU).
    `devices` > 1 shards the cohort over that many devices (`run --devices`; on CPU after
    `split_cpu`), `client_lanes`: `RunConfig.client_lanes` (each device's clients that many
    at a time).

    Returns a dict: seconds per round (one value per call), seconds per evaluation, compile
    seconds, local steps, test accuracy at each evaluation, and the data that the peer must
    see (`data`, `ds`, not JSON).
    """
    cfg, hp, w = configure(name, quick, data_dir, cache_dir)
    t = time.perf_counter()
    data, ds = load_federated(cfg)
    load_s = time.perf_counter() - t
    counts = np.asarray(data.train.count)
    steps = int(round(float(epoch_steps(counts, cfg.batch_size).mean())))
    steps = min(steps, w.max_local_steps or steps)
    cfg = cfg.replace(local_steps=steps, rounds=rounds, local_unroll=local_unroll,
                      conv_impl=conv_impl, client_lanes=client_lanes)
    # "auto" resolved as `fedjax-appeal run` resolves it for this layout (`assemble`)
    model = model_for(cfg.model, data, ds, conv_impl_for(cfg, devices))
    mesh = make_mesh(devices) if devices > 1 else None
    alg = build("fedavg", model, cfg,
                executor=Executor(cfg.client_chunk, mesh, cfg.client_lanes))
    hpa = hp.as_arrays()
    k_init, k_train = split_key(jax.random.key(cfg.seed))
    host_data = data
    data = replicate(data, mesh)
    state = replicate(jax.jit(alg.init)(k_init, data, hpa), mesh)
    every = min(cfg.eval_every, rounds)
    rpc = 1 if program == "round" else max(1, min(rounds_per_call, every))
    if every % rpc:
        raise ValueError(f"rounds per call {rpc} must divide eval_every {every}")
    rr = jnp.arange(rpc, dtype=jnp.int32)

    def test_eval(st, d):
        ev = evaluate_split(model, st.params, st.model_state, d.test)
        return jnp.sum(ev.acc * ev.count) / jnp.sum(ev.count)

    t = time.perf_counter()
    # traced under the run's mesh, as the library's driver does: passes over all clients
    # (the evaluation) spread their rows over its devices
    with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
        if program == "round":
            one = jax.jit(alg.round).lower(state, data, k_train, hpa).compile()

            def chunk(st, d, key, h, r):
                return one(st, d, jax.random.fold_in(key, r[0]), h)
        else:
            chunk = jax.jit(make_chunk(alg)).lower(state, data, k_train, hpa, rr).compile()
        evaluate = jax.jit(test_eval).lower(state, data).compile()
    compile_s = time.perf_counter() - t
    per_round, eval_s, accs = [], [], []
    done = rounds - rounds % every
    for start in range(0, done, rpc):
        t = time.perf_counter()
        state, _ = chunk(state, data, k_train, hpa, rr + start)
        jax.block_until_ready(state.params)
        per_round.append((time.perf_counter() - t) / rpc)
        if (start + rpc) % every == 0:
            t = time.perf_counter()
            accs.append(float(evaluate(state, data)))
            eval_s.append(time.perf_counter() - t)
    n_params = int(sum(a.size for a in jax.tree.leaves(state.params)))
    flops, flops_src, _ = step_flops(model, cfg.batch_size)  # one client's local step
    return {"workload": name, "clients": cfg.clients, "cohort": cfg.cohort,
            "batch_size": cfg.batch_size, "local_steps": steps, "eval_every": every,
            "rounds_per_call": rpc, "program": program, "local_unroll": local_unroll,
            "conv_impl": model.module.conv_impl, "devices": devices,
            "client_lanes": client_lanes,
            "rounds": done, "train_rows": int(counts.sum()),
            "test_rows": int(np.asarray(data.test.count).sum()),
            "mean_epoch_steps": float(epoch_steps(counts, cfg.batch_size).mean()),
            "client_lr": hp.client_lr, "n_params": n_params, "load_s": load_s,
            "compile_s": compile_s, "sec_per_round": per_round, "eval_s": eval_s,
            "step_flops": flops, "step_flops_source": flops_src,
            "round_flops": flops * steps * cfg.cohort,
            "test_acc": accs, "data": host_data, "ds": ds}


def derived_100(sec_round: list[float], eval_s: list[float], every: int) -> float:
    """Seconds per 100 rounds, derived: 100 x median s/round + (100 / every) x median s/eval."""
    return 100 * float(np.median(sec_round)) + (100 // every) * float(np.median(eval_s))


def save_for_peer(data, ds, folder: Path) -> None:
    """The clients' arrays as .npy files (memory-mappable by the peer's clients)."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        arr = getattr(data, split)
        for k in ("x", "y", "offset", "count"):
            np.save(folder / f"{split}_{k}.npy", np.asarray(getattr(arr, k)))
    mean = np.broadcast_to(np.asarray(ds.mean, np.float32), (np.asarray(data.train.x).shape[-1]
                                                             if np.asarray(data.train.x).ndim == 4
                                                             else 1,))
    std = np.broadcast_to(np.asarray(ds.std, np.float32), mean.shape)
    np.save(folder / "norm.npy", np.stack([mean, std]).astype(np.float32))
    np.save(folder / "scale.npy", np.float32(ds.scale))


# The Flower program (runs in the Flower venv). Written as a Flower user would: the model,
# a NumPyClient, client_fn / ClientApp, FedAvg with a central evaluate_fn, ServerApp,
# run_simulation. The only additions are the timestamps and a JSON of what was measured.
FLOWER_WORKER = textwrap.dedent('''
    """Flower simulation of FedAvg on client arrays from .npy files (run in the Flower venv)."""
    import json
    import os
    import sys
    import time
    from collections import OrderedDict

    import flwr
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation

    ARGS = json.loads(sys.argv[1])
    D = ARGS["folder"]
    NORM = np.load(os.path.join(D, "norm.npy"))
    SCALE = float(np.load(os.path.join(D, "scale.npy")))
    NUM_CLASSES, BATCH, LR = ARGS["num_classes"], ARGS["batch_size"], ARGS["client_lr"]
    DEVICE = torch.device(ARGS["device"])


    def load(split, k):
        return np.load(os.path.join(D, f"{split}_{k}.npy"), mmap_mode="r")


    class Net(nn.Module):
        def __init__(self, in_hw, in_ch, num_classes):
            super().__init__()
            flat = ((in_hw - 4) // 2) ** 2 * 64
            self.register_buffer("mean", torch.tensor(NORM[0]))
            self.register_buffer("std", torch.tensor(NORM[1]))
            self.body = nn.Sequential(
                nn.Conv2d(in_ch, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(flat, 128),
                nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, num_classes))
            for m in self.body:
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.xavier_uniform_(m.weight)

        def forward(self, x):  # uint8 [B, H, W] or [B, H, W, C]
            x = x.float() * SCALE
            if x.dim() == 3:
                x = x.unsqueeze(-1)
            x = (x - self.mean) / self.std
            return self.body(x.permute(0, 3, 1, 2))


    X0 = load("train", "x")
    SHAPE = (X0.shape[1], X0.shape[3] if X0.ndim == 4 else 1)


    def get_weights(net):
        return [v.cpu().numpy() for v in net.state_dict().values()]


    def set_weights(net, weights):
        keys = net.state_dict().keys()
        net.load_state_dict(OrderedDict((k, torch.tensor(v)) for k, v in zip(keys, weights)))


    class FlowerClient(NumPyClient):
        def __init__(self, net, loader):
            self.net, self.loader = net, loader

        def fit(self, parameters, config):
            set_weights(self.net, parameters)
            self.net.train()
            opt = torch.optim.SGD(self.net.parameters(), lr=LR)
            steps = 0
            for x, y in self.loader:  # one local epoch
                x, y = x.to(DEVICE), y.to(DEVICE)
                opt.zero_grad()
                F.cross_entropy(self.net(x), y).backward()
                opt.step()
                steps += 1
            return get_weights(self.net), len(self.loader.dataset), {"steps": steps}


    def client_fn(context: Context):
        torch.set_num_threads(ARGS["client_threads"])
        k = int(context.node_config["partition-id"])
        off, cnt = int(load("train", "offset")[k]), int(load("train", "count")[k])
        x = torch.as_tensor(np.array(load("train", "x")[off:off + cnt]))
        y = torch.as_tensor(np.array(load("train", "y")[off:off + cnt]), dtype=torch.int64)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                             batch_size=BATCH, shuffle=True)
        return FlowerClient(Net(*SHAPE, NUM_CLASSES).to(DEVICE), loader).to_client()


    MARKS, EVALS, ACCS = [], [], []
    TEST_X = torch.as_tensor(np.array(load("test", "x"))).to(DEVICE)
    TEST_Y = torch.as_tensor(np.array(load("test", "y")), dtype=torch.int64).to(DEVICE)
    EVAL_NET = Net(*SHAPE, NUM_CLASSES).to(DEVICE)


    def evaluate_fn(server_round, parameters, config):
        MARKS.append((server_round, time.perf_counter()))
        if server_round % ARGS["eval_every"] != 0:
            return None
        t = time.perf_counter()
        set_weights(EVAL_NET, parameters)
        EVAL_NET.eval()
        correct, loss = 0, 0.0
        with torch.no_grad():
            for i in range(0, len(TEST_Y), 1000):
                out = EVAL_NET(TEST_X[i:i + 1000])
                loss += float(F.cross_entropy(out, TEST_Y[i:i + 1000], reduction="sum"))
                correct += int((out.argmax(1) == TEST_Y[i:i + 1000]).sum())
        EVALS.append((server_round, time.perf_counter() - t))
        ACCS.append(correct / len(TEST_Y))
        return loss / len(TEST_Y), {"accuracy": correct / len(TEST_Y)}


    STEPS = []


    def fit_metrics(results):
        STEPS.append(sum(m["steps"] for _, m in results))
        return {}


    def server_fn(context: Context):
        torch.set_num_threads(ARGS["server_threads"])
        n = ARGS["num_clients"]
        strategy = FedAvg(fraction_fit=ARGS["cohort"] / n, min_fit_clients=ARGS["cohort"],
                          fraction_evaluate=0.0, min_evaluate_clients=0,
                          min_available_clients=n, evaluate_fn=evaluate_fn,
                          fit_metrics_aggregation_fn=fit_metrics,
                          initial_parameters=ndarrays_to_parameters(
                              get_weights(Net(*SHAPE, NUM_CLASSES))))
        return ServerAppComponents(strategy=strategy,
                                   config=ServerConfig(num_rounds=ARGS["rounds"]))


    t0 = time.perf_counter()
    run_simulation(server_app=ServerApp(server_fn=server_fn),
                   client_app=ClientApp(client_fn=client_fn), num_supernodes=ARGS["num_clients"],
                   backend_config={"client_resources": {"num_cpus": ARGS["client_cpus"],
                                                        "num_gpus": ARGS["client_gpus"]}})
    wall = time.perf_counter() - t0
    # seconds of round r = mark(r) - mark(r - 1) - evaluation time spent at mark(r - 1)
    ev = dict(EVALS)
    marks = dict(MARKS)
    rounds = [marks[r] - marks[r - 1] - ev.get(r - 1, 0.0) for r in range(1, ARGS["rounds"] + 1)
              if r in marks and r - 1 in marks]
    json.dump({"round_s": rounds, "eval_s": [s for r, s in EVALS if r > 0],
               "eval0_s": ev.get(0), "test_acc": ACCS[1:], "steps_per_round": STEPS,
               "wall_s": wall, "rounds_done": len(rounds), "flwr": flwr.__version__,
               "torch": torch.__version__, "device": str(DEVICE),
               "device_name": (torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda"
                               else "cpu"),
               "client_cpus": ARGS["client_cpus"], "client_gpus": ARGS["client_gpus"]},
              open(ARGS["out"], "w"))
''')


class PeerError(RuntimeError):
    """The peer could not be run; the message is one line."""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errs = [ln for ln in lines if "Error" in ln or ln.startswith("ERROR")]
    return (errs or lines or ["(no output)"])[-1][:300]


def flower_python(venv: Path = FLOWER_VENV, python: str = "", path: str = "") -> Path:
    """The interpreter that runs Flower, after checking that flwr, ray and torch import there.

    `python`: an interpreter other than the venv's (e.g. the system's, where no venv can
    be made), with `path` as its PYTHONPATH (where flwr[simulation] was unpacked).
    """
    py = Path(python) if python else venv / "bin" / "python"
    where = python or str(venv)
    if not py.exists():
        raise PeerError(f"no Flower interpreter at {py}: create the venv with "
                        f"`{FLOWER_INSTALL}` or pass --flower-python")
    r = subprocess.run([str(py), "-c", "import flwr, ray, torch, flwr.simulation"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
    if r.returncode != 0:
        raise PeerError(f"flwr[simulation] does not import in {where}: {_last_line(r.stderr)}")
    return py


def client_gpus(spec: str, device: str, client_cpus: int = 1) -> list[float]:
    """Ray `num_gpus` per Flower client actor, one Flower run per value.

    Default (`spec` empty): 0 on cpu; on cuda 1 (a whole GPU per client, so one client at a
    time: Flower's tutorial setting) and 1 / (CPUs / client_cpus) (every CPU's actor shares
    the GPU).
    """
    if spec:
        try:
            vals = [float(v) for v in spec.split(",") if v]
        except ValueError:
            raise ValueError(f"--client-gpus {spec!r} is not a comma list of numbers") from None
        if not vals or any(v < 0 or v > 1 for v in vals):
            raise ValueError(f"--client-gpus {spec!r}: each value must lie in [0, 1]")
        if device == "cpu" and any(vals):
            raise ValueError("--client-gpus above 0 needs --peer-device cuda")
        return vals
    if device == "cpu":
        return [0.0]
    actors = max(1, (os.cpu_count() or 1) // max(1, client_cpus))
    return [1.0] if actors == 1 else [1.0, 1.0 / actors]


def peer_device(choice: str) -> str:
    """The torch device of the Flower side: `auto` = cuda where JAX runs on a GPU, else cpu."""
    if choice != "auto":
        return choice
    return "cuda" if jax.default_backend() == "gpu" else "cpu"


def run_flower(py: Path, folder: Path, res: dict, num_classes: int, rounds: int,
               client_cpus: int = 1, timeout: float = 3600, device: str = "cpu",
               client_gpus: float = 0.0, path: str = "") -> dict:
    """Run the Flower program on the arrays in `folder`; its measurements as a dict.

    `device`: the torch device of the clients and of the evaluation; `client_gpus`: Ray's
    `num_gpus` per client actor (a fraction lets 1 / fraction clients share one GPU);
    `path`: the interpreter's PYTHONPATH.
    """
    worker = folder / "flower_worker.py"
    worker.write_text(FLOWER_WORKER)
    out = folder / "flower.json"
    args = {"folder": str(folder), "out": str(out), "num_classes": num_classes,
            "batch_size": res["batch_size"], "client_lr": res["client_lr"],
            "num_clients": res["clients"], "cohort": res["cohort"], "rounds": rounds,
            "eval_every": res["eval_every"], "client_cpus": client_cpus, "client_threads": 1,
            "server_threads": os.cpu_count() or 1, "device": device,
            "client_gpus": client_gpus}
    try:
        r = subprocess.run([str(py), str(worker), json.dumps(args)], capture_output=True,
                           text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": path})
    except subprocess.TimeoutExpired as e:
        raise PeerError(f"the Flower simulation did not finish in {timeout:.0f} s") from e
    (folder / "flower.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0 or not out.exists():
        raise PeerError(f"the Flower simulation failed: {_last_line(r.stderr + r.stdout)}")
    peer = json.loads(out.read_text())
    if peer["rounds_done"] < rounds:
        raise PeerError(f"the Flower simulation ran {peer['rounds_done']} of {rounds} rounds "
                        f"(see its log): {_last_line(r.stderr + r.stdout)}")
    return peer


def _cell(xs: list[float]) -> str:
    st = stats(xs)
    return f"{st['min']:.3f} / {st['median']:.3f}"


def report(rows: list[dict], client_cpus: int = 1) -> tuple[list[str], str]:
    """Markdown table and notes from result rows (each {"ours": ...} and maybe "flower").

    Rows of one workload may come from several runs (e.g. two programs of ours) or repeats
    (`--repeats`): an `ours` row is compared with the Flower run of its own row, else with
    the workload's Flower measurement, wherever that came from. With several repeats of a
    workload, a second table pairs each repeat's two sides (`paired`).
    """
    flower = {r["ours"]["workload"]: r["flower"] for r in rows if "flower" in r}
    repeated = any(r.get("repeat", 0) > 0 for r in rows)
    lines = ["| workload | side | s/round (min / median) | s/eval (min / median) | client steps "
             "/ round | derived s per 100 rounds | this / Flower (per 100 rounds; per round; "
             "per client step; > 1 = slower than Flower) |", "|---|---|---|---|---|---|---|"]
    notes, seen = [], set()
    for row in rows:
        o = row["ours"]
        name = o["workload"]
        f = row.get("flower") or flower.get(name)
        cell = "—"
        if f is not None:
            per_round = float(np.median(o["sec_per_round"]) / np.median(f["steady_round_s"]))
            work = f["mean_steps_per_round"] / (o["local_steps"] * o["cohort"])
            cell = (f"{o['derived_100_s'] / f['derived_100_s']:.3g}×; {per_round:.3g}×; "
                    f"{per_round * work:.3g}×")
        prog = (f"{o.get('program', 'chunk')}, conv {o.get('conv_impl', 'xla')}, local_unroll "
                f"{o.get('local_unroll', 1)}"
                + (f", --cpu-devices {o['devices']} --devices {o['devices']} --client-lanes "
                   f"{o.get('client_lanes', 0)}" if o.get("devices", 1) > 1 else "")
                + f", {o['rounds']} rounds"
                + (f", repeat {row.get('repeat', 0) + 1}" if repeated else ""))
        lines.append(f"| {name} | fedjax_appeal ({prog}) | {_cell(o['sec_per_round'])} | "
                     f"{_cell(o['eval_s'])} | {o['local_steps'] * o['cohort']} | "
                     f"{o['derived_100_s']:.1f} | {cell} |")
        s = (f"**{name}**, ours ({prog}): {o['clients']} clients, {o['train_rows']} train rows, "
             f"{o['test_rows']} test rows, cohort {o['cohort']}, batch {o['batch_size']}, client "
             f"lr {o['client_lr']:.4g}, server SGD lr 1, simple_cnn ({o['n_params']:,} "
             f"parameters), {o['local_steps']} local steps per client (one epoch: mean "
             f"ceil(n_k/b) = {o['mean_epoch_steps']:.2f}), compile {o['compile_s']:.1f} s, test "
             "accuracy " + ", ".join(f"{a:.3f}" for a in o["test_acc"]) + ".")
        if o.get("round_flops") and o.get("matmul_peak"):
            got = o["round_flops"] / min(o["sec_per_round"])
            s += (f" Training FLOP/s: {o['round_flops'] / 1e9:.1f} GFLOP per round "
                  f"({o['step_flops'] / 1e6:.1f} MFLOP per client step, "
                  f"{o['step_flops_source']}) in the best round = {got / 1e9:.1f} GFLOP/s, "
                  f"{100 * got / o['matmul_peak']:.0f}% of the fp32 matmul peak measured in the "
                  f"same process ({o['matmul_peak'] / 1e9:.1f} GFLOP/s, 2048x2048 jnp.dot).")
        notes.append(s)
    for row in rows:
        name = row["ours"]["workload"]
        if "flower" not in row or (name, row.get("repeat", 0)) in seen:
            continue
        seen.add((name, row.get("repeat", 0)))
        f = row["flower"]
        again = f", repeat {row.get('repeat', 0) + 1}" if repeated else ""
        where = (f", {f['device']}, num_gpus {f['client_gpus']:.4g} per client"
                 if f.get("device", "cpu") != "cpu" else "")
        lines.append(f"| {name} | Flower {f['flwr']} simulation (torch {f['torch']}{where}), "
                     f"{f['rounds_done']} rounds{again} | {_cell(f['steady_round_s'])} | "
                     f"{_cell(f['eval_s'])} | {f['mean_steps_per_round']:.1f} | "
                     f"{f['derived_100_s']:.1f} | 1 |")
        notes.append(f"**{name}**, Flower{again}: first round (Ray starting the client actors) "
                     f"{f['round_s'][0]:.1f} s, whole simulation wall {f['wall_s']:.1f} s, "
                     "client steps per round " + ", ".join(map(str, f["steps_per_round"]))
                     + "; test accuracy every 10 rounds "
                     + ", ".join(f"{a:.3f}" for a in f["test_acc"]) + ".")
        others = [g for g in row.get("flower_runs", []) if g is not f and g != f]
        if others:
            notes.append(f"**{name}**, Flower's other settings (the table holds its fastest): "
                         + "; ".join(f"num_gpus {g['client_gpus']:.4g} per client "
                                     f"{_cell(g['steady_round_s'])} s/round, "
                                     f"{_cell(g['eval_s'])} s/eval, derived "
                                     f"{g['derived_100_s']:.1f} s per 100 rounds"
                                     for g in others) + ".")
    notes.append("Ours: one compiled program per round (min/median over rounds), its test "
                 "evaluation after the measured rounds; Flower: per round from the timestamps "
                 "of the strategy's evaluate_fn, round 1 excluded. One run per side"
                 + (" per repeat, the repeats interleaved (each workload's two sides, then "
                    "the next repeat)" if repeated else "") + ". Derived s "
                 "per 100 rounds = 100 x median s/round + 10 evaluations x median s/eval "
                 "(derived, not measured over 100 rounds). Per client step = the per-round ratio "
                 "times Flower's realised client steps per round over ours. Flower: Ray "
                 f"backend, {client_cpus} CPU per client actor, torch threads 1 per actor, all "
                 "cores for the server's evaluation; on a GPU the clients and the evaluation "
                 "run there (num_gpus per client actor as stated).")
    pair = paired(rows)
    if pair:
        lines += ["", *pair]
    return lines, "\n\n".join(notes)


def paired(rows: list[dict]) -> list[str]:
    """With several repeats of a workload: each repeat's Flower / ours time per 100 rounds
    (above 1: ours faster), in run order, their median and minimum, and in how many repeats
    ours was the faster side. [] when no workload ran twice with Flower."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        if "flower" in r:
            by.setdefault(r["ours"]["workload"], []).append(r)
    if not any(len(rs) > 1 for rs in by.values()):
        return []
    lines = ["| workload | repeats | Flower / ours per 100 rounds, each repeat in run order (> 1 "
             "= ours faster) | median | min | ours faster in |", "|---|---|---|---|---|---|"]
    for name, rs in by.items():
        q = [r["flower"]["derived_100_s"] / r["ours"]["derived_100_s"] for r in rs]
        lines.append(f"| {name} | {len(q)} | " + ", ".join(f"{x:.2f}" for x in q)
                     + f" | {float(np.median(q)):.2f} | {min(q):.2f} | "
                     f"{sum(x > 1 for x in q)} of {len(q)} |")
    return lines


def publish(rows: list[dict], client_cpus: int, append: bool) -> None:
    """Print the report of `rows` and, when `append`, add it to benchmarks/RESULTS.md."""
    lines, notes = report(rows, client_cpus)
    if append:
        append_results("Peer workloads: pfl-research CIFAR-10 and FedJAX EMNIST-style FedAvg vs "
                       f"Flower simulation ({jax.default_backend()})", "\n".join(lines), notes)
    print("\n".join(lines))
    print(notes)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="cifar10_pfl,femnist_fedjax",
                    help="comma list of " + ",".join(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=20,
                    help="measured rounds per side (a multiple of eval_every = 10)")
    ap.add_argument("--ours-rounds", type=int, default=0,
                    help="measured rounds of our side when fewer than --rounds (0 = --rounds); "
                         "its evaluation then runs every min(eval_every, this) rounds")
    ap.add_argument("--program", default="chunk", choices=("chunk", "round"),
                    help="our compiled program: chunk = the library's scan over rounds (1 round "
                         "per call); round = the round jitted alone")
    ap.add_argument("--local-unroll", type=int, default=1,
                    help="RunConfig.local_unroll of our side (0 = local steps unrolled)")
    ap.add_argument("--conv-impl", default="auto", choices=CONV_IMPLS,
                    help="RunConfig.conv_impl of our side (auto = pooled_winograd_train on CPU, "
                         "patches_train on GPU)")
    ap.add_argument("--cpu-devices", type=int, default=-1,
                    help="our side: split the CPU into this many devices and shard the cohort "
                         "over them (0 = one device; default -1 = the automatic layout of "
                         "`fedjax-appeal run`, execute/layout.py, for the workload's cohort)")
    ap.add_argument("--client-lanes", type=int, default=None,
                    help="our side: RunConfig.client_lanes (with --cpu-devices: each device's "
                         "clients that many at a time; default: 1 on a split CPU, else 0)")
    ap.add_argument("--peer", default="flower", choices=("flower", "none"),
                    help="flower: Flower's simulation in benchmarks/.flower_venv; none: ours only")
    ap.add_argument("--quick", action="store_true",
                    help="10 clients, 2 per round, 2 local steps, 2 rounds (smoke test); never "
                         "appends to RESULTS.md")
    ap.add_argument("--data-dir", default="", help="npz data folder (default $FEDJAX_APPEAL_DATA)")
    ap.add_argument("--cache-dir", default="", help="decoded-array cache")
    ap.add_argument("--venv", default=str(FLOWER_VENV))
    ap.add_argument("--flower-python", default="",
                    help="run Flower with this interpreter instead of the venv's (e.g. python3 "
                         "where flwr[simulation] was unpacked into --flower-path)")
    ap.add_argument("--flower-path", default="",
                    help="PYTHONPATH of the Flower interpreter (default: none)")
    ap.add_argument("--peer-device", default="auto", choices=("auto", "cpu", "cuda"),
                    help="torch device of the Flower clients and evaluation (auto = cuda where "
                         "JAX runs on a GPU, else cpu)")
    ap.add_argument("--client-gpus", default="",
                    help="comma list of Ray num_gpus per Flower client actor, one Flower run "
                         "each, the fastest compared (default: 0 on cpu; on cuda 1 (one client "
                         "at a time, Flower's tutorial) and 1 / (CPUs / --client-cpus))")
    ap.add_argument("--client-cpus", type=int, default=1,
                    help="CPUs per Flower client actor (Ray client_resources num_cpus)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run both sides this many times, interleaved (each workload's two "
                         "sides, then the next repeat); the report pairs the repeats")
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument("--out", default="")
    ap.add_argument("--combine", default="",
                    help="comma list of result JSONs (this script's --out files) to render as "
                         "one RESULTS.md section instead of running")
    args = ap.parse_args(argv)
    if args.cpu_devices < 0:  # the automatic layout: one split that every workload's cohort
        cohorts = [QUICK[n]["cohort"] if args.quick else WORKLOADS[n].cohort  # divides
                   for n in args.workloads.split(",") if n in WORKLOADS]
        args.cpu_devices = auto_split(math.gcd(*cohorts) if cohorts else 1)
    elif args.cpu_devices > 1:
        split_cpu(args.cpu_devices)
    if args.client_lanes is None:
        args.client_lanes = 1 if args.cpu_devices > 1 else 0  # before JAX's first operation
    if args.combine and args.repeats != 1:  # it renders finished runs; nothing is repeated
        sys.exit("peer_workloads: error: --repeats runs both sides again; --combine only "
                 "renders the given JSONs: drop one of them")
    if args.combine:
        rows = [r for p in args.combine.split(",") for r in json.loads(Path(p).read_text())["rows"]]
        publish(rows, args.client_cpus, append=not args.no_append)
        return {"rows": rows}
    names = [n for n in args.workloads.split(",") if n]
    bad = [n for n in names if n not in WORKLOADS]
    if bad:
        sys.exit(f"peer_workloads: error: unknown workload {bad[0]!r}; choose from "
                 + ", ".join(WORKLOADS))
    if args.repeats < 1:
        sys.exit(f"peer_workloads: error: --repeats {args.repeats} must be at least 1")
    rounds = 2 if args.quick else args.rounds
    out = Path(args.out or HERE / "results" / ("peer_workloads_quick.json" if args.quick
                                                else "peer_workloads.json"))
    if args.peer == "none":  # the Flower options would be silently ignored
        given = [f for f, v in (("--flower-python", args.flower_python),
                                ("--flower-path", args.flower_path),
                                ("--client-gpus", args.client_gpus),
                                ("--peer-device", args.peer_device != "auto")) if v]
        if given:
            sys.exit(f"peer_workloads: error: {given[0]} configures Flower's side; drop it "
                     "or use --peer flower")
    py = None
    device = peer_device(args.peer_device)
    try:
        gpus = client_gpus(args.client_gpus, device, args.client_cpus)
    except ValueError as e:
        sys.exit(f"peer_workloads: error: {e}")
    if args.peer == "flower":
        try:
            py = flower_python(Path(args.venv), args.flower_python, args.flower_path)
        except PeerError as e:
            sys.exit(f"peer_workloads: error: {e}")
    peak = 0.0 if args.quick else matmul_peak()["best_flops"]
    rows = []
    for repeat, name in ((r, n) for r in range(args.repeats) for n in names):
        tag = name + (f" (repeat {repeat + 1} of {args.repeats})" if args.repeats > 1 else "")
        res = ours(name, min(rounds, args.ours_rounds or rounds), args.quick, args.data_dir,
                   args.cache_dir, program=args.program, local_unroll=args.local_unroll,
                   conv_impl=args.conv_impl, devices=max(1, args.cpu_devices),
                   client_lanes=args.client_lanes)
        data, ds = res.pop("data"), res.pop("ds")
        res["matmul_peak"] = peak
        every = QUICK[name]["eval_every"] if args.quick else WORKLOADS[name].eval_every
        res["derived_100_s"] = derived_100(res["sec_per_round"], res["eval_s"], every)
        print(f"{tag}: ours {_cell(res['sec_per_round'])} s/round, eval "
              f"{_cell(res['eval_s'])} s, {res['local_steps']} local steps, compile "
              f"{res['compile_s']:.1f} s, test acc {res['test_acc']}", flush=True)
        row = {"ours": res, "repeat": repeat}
        write_json(out.with_suffix(".partial.json"), {"rows": [*rows, row]})
        if py is not None:
            runs = []
            with tempfile.TemporaryDirectory(prefix="peer_workloads_") as tmp:
                save_for_peer(data, ds, Path(tmp))
                for g in gpus:
                    try:
                        peer = run_flower(py, Path(tmp), {**res, "eval_every": every},
                                          data.num_classes, rounds, args.client_cpus,
                                          device=device, client_gpus=g, path=args.flower_path)
                    except PeerError as e:
                        sys.exit(f"peer_workloads: error: {e}")
                    # round 1 starts the Ray actors: reported apart, not in the per-round
                    # figures
                    steady = peer["round_s"][1:] or peer["round_s"]
                    peer["steady_round_s"] = steady
                    peer["derived_100_s"] = derived_100(steady, peer["eval_s"], every)
                    peer["mean_steps_per_round"] = float(np.mean(peer["steps_per_round"]))
                    runs.append(peer)
                    print(f"{tag}: Flower on {device}, num_gpus {g:.4g} per client: "
                          f"{_cell(steady)} s/round, derived {peer['derived_100_s']:.1f} s "
                          "per 100 rounds", flush=True)
            peer = min(runs, key=lambda f: f["derived_100_s"])  # the peer's fastest setting
            steady = peer["steady_round_s"]
            row["flower"] = peer
            if len(runs) > 1:
                row["flower_runs"] = runs
            row["flower_over_ours_round_median"] = float(np.median(steady)
                                                         / np.median(res["sec_per_round"]))
            row["flower_over_ours_100"] = peer["derived_100_s"] / res["derived_100_s"]
            work = peer["mean_steps_per_round"] / (res["local_steps"] * res["cohort"])
            row["flower_over_ours_per_step"] = row["flower_over_ours_round_median"] / work
            print(f"{tag}: Flower {_cell(steady)} s/round (first round "
                  f"{peer['round_s'][0]:.2f} s), eval {_cell(peer['eval_s'])} s, "
                  f"{peer['mean_steps_per_round']:.1f} client steps/round, test acc "
                  f"{peer['test_acc']}; Flower / ours per 100 rounds "
                  f"{row['flower_over_ours_100']:.3g}", flush=True)
        rows.append(row)
        write_json(out.with_suffix(".partial.json"), {"rows": rows})

    result = {"machine": machine(), "backend": jax.default_backend(), "rounds": rounds,
              "repeats": args.repeats, "quick": args.quick, "peer": args.peer, "rows": rows}
    write_json(out, result)
    if args.quick or args.no_append:
        return result
    publish(rows, args.client_cpus, append=not args.no_append)
    return result


if __name__ == "__main__":
    main()
