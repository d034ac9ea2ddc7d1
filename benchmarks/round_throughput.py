"""Seconds per FedAvg round: fedjax_appeal (vmapped cohort, jitted scan) vs a sequential
PyTorch loop over the cohort doing the same computation.

Workload: FedAvg, Fashion-MNIST, Dirichlet(0.5), MLP [64, 30] with dropout, tau = 50 local
SGD steps of batch 64 per client, n_k-weighted average. 100 clients for cohorts 10 and 100;
a cohort of 1000 uses 1000 clients (same data, same partition recipe). The PyTorch loop
copies the global model into each client, runs the same tau minibatch SGD steps (uniform
sampling with replacement from the client's rows, uint8 -> normalised on the fly) and
accumulates the n_k-weighted average; PyTorch is only needed here (`pip install torch`).

Compile time is reported apart; each figure is min/median over repeats of whole rounds.

    python benchmarks/round_throughput.py --cohorts 10,100 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, append_results, machine, stats, time_repeats, write_json  # noqa: E402

from fedjax_appeal.algorithms import build  # noqa: E402
from fedjax_appeal.config import HParams, RunConfig  # noqa: E402
from fedjax_appeal.data import load_federated  # noqa: E402
from fedjax_appeal.models import model_for  # noqa: E402
from fedjax_appeal.simulate import make_chunk, split_key  # noqa: E402

FMNIST_DIR = "/usr/share/datasets/fashion-mnist"
WORKLOAD = "FedAvg FMNIST Dirichlet(0.5), MLP[64,30], tau=50, b=64"
HP = HParams(client_lr=0.05)


def workload(cohort: int, clients: int | None = None, fmnist_dir: str = FMNIST_DIR) -> RunConfig:
    """The benchmark's FedAvg configuration (see the module docstring) for one cohort size.

    `clients` defaults to max(100, cohort). Other benchmarks import this, so that they all
    run the same workload.
    """
    clients = max(100, cohort) if clients is None else clients
    return RunConfig(dataset="fmnist", fmnist_dir=fmnist_dir, partition="dirichlet", alpha=0.5,
                     clients=clients, unseen_clients=0, cohort=cohort, local_steps=50,
                     batch_size=64, min_samples=10)


def jax_round_times(cfg, hp, rounds_per_call, repeats):
    data, ds = load_federated(cfg)
    model = model_for(cfg.model, data, ds)
    alg = build("fedavg", model, cfg)
    hp = hp.as_arrays()
    k_init, k_train = split_key(jax.random.key(cfg.seed))
    state = jax.jit(alg.init)(k_init, data, hp)
    rounds = jnp.arange(rounds_per_call, dtype=jnp.int32)
    t = time.perf_counter()
    chunk = jax.jit(make_chunk(alg)).lower(state, data, k_train, hp, rounds).compile()
    compile_s = time.perf_counter() - t
    box = {"state": state, "r": 0}

    def call():
        rr = rounds + box["r"]
        box["state"], _ = chunk(box["state"], data, k_train, hp, rr)
        jax.block_until_ready(box["state"].params)
        box["r"] += rounds_per_call

    secs = [s / rounds_per_call for s in time_repeats(call, repeats)]
    n_params = sum(a.size for a in jax.tree.leaves(state.params))
    return secs, compile_s, data, ds, n_params


def torch_round_times(data, ds, cfg, hp, repeats, device):
    import torch
    import torch.nn as nn

    torch.manual_seed(cfg.seed)
    tr = data.train
    x_all = torch.as_tensor(np.array(tr.x)).to(device)
    y_all = torch.as_tensor(np.array(tr.y, dtype=np.int64)).to(device)
    offset = np.asarray(tr.offset)
    count = np.asarray(tr.count)
    mean, std, scale = float(np.asarray(ds.mean)), float(np.asarray(ds.std)), float(ds.scale)

    def make():
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Dropout(0.2),
                             nn.Linear(64, 30), nn.ReLU(), nn.Linear(30, 10)).to(device)

    global_model = make()
    client = make()
    loss_fn = nn.CrossEntropyLoss()
    lr = float(hp.client_lr)
    rng = np.random.default_rng(cfg.seed)

    def one_round():
        cohort = rng.choice(tr.num_clients, cfg.cohort, replace=False)
        gstate = {k: v.clone() for k, v in global_model.state_dict().items()}
        acc = {k: torch.zeros_like(v) for k, v in gstate.items()}
        tot = 0.0
        for k in cohort:
            client.load_state_dict(gstate)
            opt = torch.optim.SGD(client.parameters(), lr=lr)
            client.train()
            for _ in range(cfg.local_steps):
                idx = int(offset[k]) + torch.randint(int(count[k]), (cfg.batch_size,),
                                                      device=device)
                xb = (x_all[idx].float() * scale - mean) / std
                opt.zero_grad(set_to_none=True)
                loss_fn(client(xb), y_all[idx]).backward()
                opt.step()
            n = float(count[k])
            tot += n
            with torch.no_grad():
                for name, v in client.state_dict().items():
                    acc[name] += n * v
        with torch.no_grad():
            global_model.load_state_dict({k: v / tot for k, v in acc.items()})
        if device != "cpu":
            torch.cuda.synchronize()

    return time_repeats(one_round, repeats), torch.__version__, torch.get_num_threads()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohorts", default="10,100,1000")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--torch-repeats", type=int, default=3)
    ap.add_argument("--torch-max-cohort", type=int, default=100,
                    help="skip the sequential loop above this cohort (it scales linearly)")
    ap.add_argument("--fmnist-dir", default=FMNIST_DIR)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "round_throughput.json"))
    args = ap.parse_args()

    hp = HP
    on_gpu = jax.default_backend() == "gpu"
    device = "cuda" if on_gpu else "cpu"
    rows = []
    for m in [int(c) for c in args.cohorts.split(",")]:
        cfg = workload(m, fmnist_dir=args.fmnist_dir)
        clients = cfg.clients
        rpc = 4 if m <= 10 else (2 if m <= 100 else 1)
        secs, compile_s, data, ds, n_params = jax_round_times(cfg, hp, rpc, args.repeats)
        row = {"cohort": m, "clients": clients, "jax": stats(secs), "jax_compile_s": compile_s,
               "samples_per_s": m * 50 * 64 / min(secs)}
        print(f"cohort {m:5d}: jax {min(secs):.4f} / {np.median(secs):.4f} s/round "
              f"(min/median), compile {compile_s:.1f}s", flush=True)
        if not args.no_torch and m <= args.torch_max_cohort:
            tsecs, tver, nthreads = torch_round_times(data, ds, cfg, hp, args.torch_repeats,
                                                      device)
            row.update(torch=stats(tsecs), torch_version=tver, torch_threads=nthreads,
                       speedup_median=float(np.median(tsecs) / np.median(secs)),
                       speedup_min=float(min(tsecs) / min(secs)))
            print(f"             torch {min(tsecs):.4f} / {np.median(tsecs):.4f} s/round -> "
                  f"speedup {row['speedup_median']:.2f}x (median)", flush=True)
        rows.append(row)

    result = {"machine": machine(), "backend": jax.default_backend(), "rows": rows,
              "workload": WORKLOAD}
    write_json(Path(args.out), result)
    lines = ["| cohort | clients | ours s/round (min / median) | compile s | sequential "
             "PyTorch s/round (min / median) | speedup (median) |", "|---|---|---|---|---|---|"]
    for r in rows:
        t = (f"{r['torch']['min']:.4f} / {r['torch']['median']:.4f}" if "torch" in r else "—")
        s = f"{r['speedup_median']:.2f}×" if "torch" in r else "—"
        lines.append(f"| {r['cohort']} | {r['clients']} | {r['jax']['min']:.4f} / "
                     f"{r['jax']['median']:.4f} | {r['jax_compile_s']:.1f} | {t} | {s} |")
    append_results(f"FedAvg round throughput ({jax.default_backend()})", "\n".join(lines),
                   "Workload: " + result["workload"] + "; repeats: " + str(args.repeats)
                   + " (ours), " + str(args.torch_repeats) + " (PyTorch).")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
