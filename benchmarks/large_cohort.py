"""A FedAvg round with a cohort of 10,000 clients on one machine: seconds per round and
peak resident memory, through the round's automatic chunking.

Workload: the FedAvg workload of `round_throughput.py` (FMNIST, MLP [64, 30] with dropout,
tau = 50 local SGD steps of batch 64 per client, n_k-weighted average) with 10,000 clients
and a cohort of all of them. FMNIST's 70,000 rows cannot give 10,000 clients a
Dirichlet(0.5) share of >= 2 rows each, so the partition is `classes` (3 labels per
client); a round's work (tau x b rows per client) does not depend on the partition.

With `--client-chunk 0` (the default, as in `run`) the round chunks the cohort only when
16 bytes x cohort x parameters exceed a quarter of the memory budget
(`fedjax_appeal.core.memory`). FedAvg's n_k-weighted average is a softmax rule
(`WeightRule.logits`), so the chunked round makes one pass over the chunks (a running
softmax, see `execute/cohort.py`); `--passes one,two` also times the same round with the
rule's logits withheld, i.e. the two-pass round (statistics, then the weighted sum of
deltas) that rules reading the whole cohort's statistics need. Reported per mode: the chunk
size chosen, compile seconds, min / median seconds per round over `--repeats` rounds (one
jitted round per call), and the process's peak resident set so far (`ru_maxrss`, which
includes the data and the compilation).

    python benchmarks/large_cohort.py --passes one,two --repeats 1   # cohort 10,000
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

from fedjax_appeal.aggregate.aggregation import AGGREGATIONS  # noqa: E402
from fedjax_appeal.algorithms import build  # noqa: E402
from fedjax_appeal.core.memory import memory_budget  # noqa: E402
from fedjax_appeal.core.models import model_for  # noqa: E402
from fedjax_appeal.data import load_federated  # noqa: E402
from fedjax_appeal.execute.cohort import chunk_size  # noqa: E402
from fedjax_appeal.run.driver import make_chunk, split_key  # noqa: E402


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


TWO_PASS = "proportional-two-pass"  # the proportional rule without its logits


def timed(alg, data, hp, k_init, k_train, repeats: int, label: str) -> dict:
    state = jax.jit(alg.init)(k_init, data, hp)
    one = jnp.arange(1, dtype=jnp.int32)
    t = time.perf_counter()
    run = jax.jit(make_chunk(alg)).lower(state, data, k_train, hp, one).compile()
    compile_s = time.perf_counter() - t
    secs = []
    for r in range(repeats):
        t = time.perf_counter()
        state, _ = run(state, data, k_train, hp, one + r)
        jax.block_until_ready(state.params)
        secs.append(time.perf_counter() - t)
        print(f"  {label} round {r + 1}: {secs[-1]:.1f}s, peak RSS "
              f"{peak_rss_bytes() / 2**30:.2f} GiB", flush=True)
    return {"compile_s": compile_s, "sec_per_round": stats(secs), "peak_rss_bytes":
            peak_rss_bytes()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohort", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=2, help="timed rounds")
    ap.add_argument("--client-chunk", type=int, default=0,
                    help="as `run --client-chunk` (0 = automatic)")
    ap.add_argument("--passes", default="one",
                    help="comma list: one (the library's round) and/or two (the proportional "
                         "rule without logits: the two-pass chunked round)")
    ap.add_argument("--fmnist-dir", default=FMNIST_DIR)
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "large_cohort.json"))
    args = ap.parse_args()
    modes = [p.strip() for p in args.passes.split(",") if p.strip()]
    if not modes or set(modes) - {"one", "two"}:
        sys.exit(f"large_cohort: error: --passes takes one and/or two, got {args.passes!r}")

    m = args.cohort
    cfg = workload(m, clients=m, fmnist_dir=args.fmnist_dir).replace(
        partition="classes", classes_per_client=3, min_samples=2,
        client_chunk=args.client_chunk)
    t = time.perf_counter()
    data, ds = load_federated(cfg)
    load_s = time.perf_counter() - t
    model = model_for(cfg.model, data, ds)
    hp = HP.as_arrays()
    k_init, k_train = split_key(jax.random.key(cfg.seed))
    if "two" in modes and TWO_PASS not in AGGREGATIONS:
        AGGREGATIONS.register(TWO_PASS)(AGGREGATIONS["proportional"]._replace(logits=None))
    # one chunk size for every mode (the automatic rule reads free memory, which moves)
    chunk = chunk_size(cfg.client_chunk, m, jax.eval_shape(
        build("fedavg", model, cfg).init, k_init, data, hp).params)
    cfg = cfg.replace(client_chunk=chunk or -1)
    print(f"cohort {m}: chunk {chunk or 'none (one vmap)'}; memory budget "
          f"{memory_budget() / 2**30:.1f} GiB; data loaded in {load_s:.1f}s", flush=True)
    results = {}
    for mode in modes:
        c = cfg.replace(aggregation=TWO_PASS) if mode == "two" else cfg
        results[mode] = timed(build("fedavg", model, c), data, hp, k_init, k_train,
                              args.repeats, f"{mode} pass")
    result = {"machine": machine(), "backend": jax.default_backend(), "cohort": m,
              "clients": m, "workload": WORKLOAD, "chunk": chunk, "modes": results,
              "memory_budget": memory_budget(), "load_average": os.getloadavg()}
    write_json(Path(args.out), result)
    n = cfg.local_steps * cfg.batch_size * m
    rows = ["| cohort | chunk (clients) | chunked round | compile s | s/round (min / median) | "
            "samples/s | peak RSS GiB (process, so far) |", "|---|---|---|---|---|---|---|"]
    for mode, r in results.items():
        st = r["sec_per_round"]
        name = ("one pass (running softmax; the library's round)" if mode == "one" else
                "two passes (statistics, then weighted deltas)")
        rows.append(f"| {m} | {chunk or 'none'} | {name if chunk else 'unchunked'} | "
                    f"{r['compile_s']:.1f} | {st['min']:.1f} / {st['median']:.1f} | "
                    f"{n / st['min']:.0f} | {r['peak_rss_bytes'] / 2**30:.2f} |")
    if len(results) == 2:
        ratio = (results["two"]["sec_per_round"]["median"]
                 / results["one"]["sec_per_round"]["median"])
        rows.append(f"\nTwo passes / one pass (median s/round): {ratio:.2f}×")
    table = "\n".join(rows)
    notes = (f"Workload: {WORKLOAD}, {m} clients (classes partition, 3 labels each), cohort "
             f"{m}, {args.repeats} timed rounds per mode after compilation. Two passes = the "
             "same proportional rule with its logits withheld, so the round trains every "
             "client twice. Peak RSS = the process's ru_maxrss after the mode (data, "
             "compilation and the rounds so far).")
    if not args.no_append:
        append_results(f"FedAvg with a cohort of {m} on one {jax.default_backend()}", table,
                       notes)
    print(table)
    print(notes)


if __name__ == "__main__":
    main()
