"""A FedAvg round with a cohort of 10,000 clients on one machine: seconds per round and
peak resident memory, through the round's automatic chunking.

Workload: the FedAvg workload of `round_throughput.py` (FMNIST, MLP [64, 30] with dropout,
tau = 50 local SGD steps of batch 64 per client, n_k-weighted average) with 10,000 clients
and a cohort of all of them. FMNIST's 70,000 rows cannot give 10,000 clients a
Dirichlet(0.5) share of >= 2 rows each, so the partition is `classes` (3 labels per
client); a round's work (tau x b rows per client) does not depend on the partition.

With `--client-chunk 0` (the default, as in `run`) the round chunks the cohort only when
16 bytes x cohort x parameters exceed a quarter of the memory budget
(`fedjax_appeal.core.memory`); it then runs two passes over chunks of clients (statistics,
then the weighted sum of deltas, see `execute/cohort.py`), so the local training is done
twice. Reported: the chunk size chosen, compile seconds, min / median seconds per round
over `--repeats` rounds (one jitted round per call), and the process's peak resident set
(`ru_maxrss`, which includes the data and the compilation).

    python benchmarks/large_cohort.py                    # cohort 10,000, 2 timed rounds
    python benchmarks/large_cohort.py --cohort 1000 --repeats 1 --no-append   # a smoke run
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, append_results, machine, stats, write_json  # noqa: E402
from round_throughput import FMNIST_DIR, HP, WORKLOAD, workload  # noqa: E402

from fedjax_appeal.algorithms import build  # noqa: E402
from fedjax_appeal.core.memory import memory_budget  # noqa: E402
from fedjax_appeal.core.models import model_for  # noqa: E402
from fedjax_appeal.data import load_federated  # noqa: E402
from fedjax_appeal.execute.cohort import chunk_size  # noqa: E402
from fedjax_appeal.run.simulate import make_chunk, split_key  # noqa: E402


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohort", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=2, help="timed rounds")
    ap.add_argument("--client-chunk", type=int, default=0,
                    help="as `run --client-chunk` (0 = automatic)")
    ap.add_argument("--fmnist-dir", default=FMNIST_DIR)
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "large_cohort.json"))
    args = ap.parse_args()

    m = args.cohort
    cfg = workload(m, clients=m, fmnist_dir=args.fmnist_dir).replace(
        partition="classes", classes_per_client=3, min_samples=2,
        client_chunk=args.client_chunk)
    t = time.perf_counter()
    data, ds = load_federated(cfg)
    load_s = time.perf_counter() - t
    model = model_for(cfg.model, data, ds)
    alg = build("fedavg", model, cfg)
    hp = HP.as_arrays()
    k_init, k_train = split_key(jax.random.key(cfg.seed))
    state = jax.jit(alg.init)(k_init, data, hp)
    chunk = chunk_size(cfg.client_chunk, m, state.params)
    print(f"cohort {m}: chunk {chunk or 'none (one vmap)'}; memory budget "
          f"{memory_budget() / 2**30:.1f} GiB; data loaded in {load_s:.1f}s", flush=True)
    one = jnp.arange(1, dtype=jnp.int32)
    t = time.perf_counter()
    run = jax.jit(make_chunk(alg)).lower(state, data, k_train, hp, one).compile()
    compile_s = time.perf_counter() - t
    secs = []
    for r in range(args.repeats):
        t = time.perf_counter()
        state, _ = run(state, data, k_train, hp, one + r)
        jax.block_until_ready(state.params)
        secs.append(time.perf_counter() - t)
        print(f"  round {r + 1}: {secs[-1]:.1f}s, peak RSS {peak_rss_bytes() / 2**30:.2f} GiB",
              flush=True)
    rss = peak_rss_bytes()
    st = stats(secs)
    result = {"machine": machine(), "backend": jax.default_backend(), "cohort": m,
              "clients": m, "workload": WORKLOAD, "chunk": chunk, "compile_s": compile_s,
              "sec_per_round": st, "peak_rss_bytes": rss, "memory_budget": memory_budget(),
              "load_average": os.getloadavg()}
    write_json(Path(args.out), result)
    n = cfg.local_steps * cfg.batch_size * m
    table = ("| cohort | chunk (clients) | compile s | s/round (min / median) | "
             "samples/s | peak RSS GiB |\n|---|---|---|---|---|---|\n"
             f"| {m} | {chunk or 'none'} | {compile_s:.1f} | {st['min']:.1f} / "
             f"{st['median']:.1f} | {n / st['min']:.0f} | {rss / 2**30:.2f} |")
    notes = (f"Workload: {WORKLOAD}, {m} clients (classes partition, 3 labels each), cohort "
             f"{m}, {args.repeats} timed rounds after compilation. Chunked rounds train "
             "every client twice (statistics pass, then the weighted-delta pass). Peak RSS = "
             "the process's ru_maxrss (data, compilation and the round).")
    if not args.no_append:
        append_results(f"FedAvg with a cohort of {m} on one {jax.default_backend()}", table,
                       notes)
    print(table)
    print(notes)


if __name__ == "__main__":
    main()
