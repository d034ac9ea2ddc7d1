"""Seconds per FedAvg round: fedjax_appeal vs FedJAX 0.0.17 (the published JAX FL
simulator) on the same workload and the same client data.

Workload: the one of `round_throughput.py` (imported from there): FedAvg, Fashion-MNIST,
100 clients Dirichlet(0.5), MLP [64, 30] with dropout 0.2 after the first hidden layer,
tau = 50 local SGD steps of batch 64 (client lr 0.05, server lr 1), n_k-weighted average;
cohorts 10 and 100.

FedJAX needs jax < 0.6, so it runs in its own virtual environment (`benchmarks/.peer_venv`,
git-ignored; created on the first run with pinned versions that resolve for Python 3.11:
fedjax 0.0.17, jax/jaxlib 0.4.30 (CPU), dm-haiku 0.0.12, optax 0.2.2, chex 0.1.86,
numpy < 2, scipy < 1.14; FedJAX does not need TensorFlow). The clients' training arrays
come from our loader and are handed to the worker in an .npz in a temporary folder, so both
sides train on identical data. The worker (written next to the .npz) builds the same MLP in
Haiku (normalisation (x * scale - mean) / std first, as ours), `fedjax.algorithms.fed_avg`
with SGD client / server optimizers and `ShuffleRepeatBatchHParams(batch_size=64,
num_steps=50)`, samples cohorts with `UniformGetClientSampler`, and times whole rounds
(`federated_averaging.apply`) after one warm-up round that compiles. FedJAX batches by
shuffling and repeating a client's rows, ours samples rows uniformly with replacement:
the same tau x b rows of work per client.

Ours: `round_throughput.jax_round_times` (one jitted scan of 4 / 2 rounds per call for
cohorts 10 / 100, compile apart). Both sides run on the CPU in one invocation (on a GPU
machine set JAX_PLATFORMS=cpu, since the peer venv has CPU jax only). Reported: s/round
min / median of each side and the ratio FedJAX / ours of the medians (target >= 3).
If FedJAX cannot be installed or run, the script exits with a one-line reason and records
what failed; it never reports numbers it did not measure.

    python benchmarks/peer_fedjax.py --cohorts 10,100 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, append_results, machine, stats, write_json  # noqa: E402
from round_throughput import FMNIST_DIR, HP, WORKLOAD, jax_round_times, workload  # noqa: E402

PEER_VENV = HERE / ".peer_venv"
PEER_REQUIREMENTS = ["fedjax==0.0.17", "jax[cpu]==0.4.30", "jaxlib==0.4.30", "dm-haiku==0.0.12",
                     "optax==0.2.2", "chex==0.1.86", "numpy<2", "scipy<1.14"]
TARGET = 3.0

WORKER = textwrap.dedent('''
    """FedJAX 0.0.17 FedAvg rounds on client arrays from an .npz (run in the peer venv)."""
    import json
    import sys
    import time

    import fedjax
    import haiku as hk
    import jax
    import jax.numpy as jnp
    import numpy as np
    from fedjax.algorithms import fed_avg

    npz, out, cohort, repeats, lr, steps, batch, seed = sys.argv[1:9]
    cohort, repeats, steps, batch, seed = (int(cohort), int(repeats), int(steps), int(batch),
                                           int(seed))
    z = np.load(npz)
    x, y, offset, count = z["x"], z["y"], z["offset"], z["count"]
    scale, mean, std = float(z["scale"]), float(z["mean"]), float(z["std"])
    clients = {str(k).encode(): {"x": x[o:o + c], "y": y[o:o + c]}
               for k, (o, c) in enumerate(zip(offset, count))}
    fd = fedjax.InMemoryFederatedData(clients)

    def forward(batch, is_train=True):
        h = (batch["x"].astype(jnp.float32) * scale - mean) / std
        h = h.reshape((h.shape[0], -1))
        h = jax.nn.relu(hk.Linear(64)(h))
        if is_train:
            h = hk.dropout(hk.next_rng_key(), 0.2, h)
        h = jax.nn.relu(hk.Linear(30)(h))
        return hk.Linear(10)(h)

    sample = {"x": x[:1], "y": y[:1]}
    model = fedjax.create_model_from_haiku(
        hk.transform(forward), sample,
        train_loss=lambda b, p: fedjax.metrics.unreduced_cross_entropy_loss(b["y"], p),
        train_kwargs={"is_train": True}, eval_kwargs={"is_train": False})
    alg = fed_avg.federated_averaging(
        fedjax.model_grad(model), fedjax.optimizers.sgd(float(lr)), fedjax.optimizers.sgd(1.0),
        fedjax.ShuffleRepeatBatchHParams(batch_size=batch, num_epochs=None, num_steps=steps))
    state = alg.init(model.init(jax.random.PRNGKey(seed)))
    sampler = fedjax.client_samplers.UniformGetClientSampler(fd, cohort, seed)

    def one_round():
        global state
        state, _ = alg.apply(state, sampler.sample())
        jax.block_until_ready(state.params)

    t = time.perf_counter()
    one_round()
    first = time.perf_counter() - t
    secs = []
    for _ in range(repeats):
        t = time.perf_counter()
        one_round()
        secs.append(time.perf_counter() - t)
    finite = all(bool(jnp.all(jnp.isfinite(a))) for a in jax.tree_util.tree_leaves(state.params))
    # Sanity check that it trains: accuracy of the final global model on all training rows.
    logits = model.apply_for_eval(state.params, {"x": x, "y": y})
    acc = float(jnp.mean(jnp.argmax(logits, -1) == y))
    json.dump({"secs": secs, "first_round_s": first, "params_finite": finite, "train_acc": acc,
               "jax": jax.__version__, "haiku": hk.__version__,
               "backend": jax.default_backend()}, open(out, "w"))
''')


class PeerError(RuntimeError):
    """FedJAX could not be installed or run; the message is one line."""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("ERROR") or "Error" in ln]
    return (errs or lines or ["(no output)"])[-1][:300]


def ensure_venv(venv: Path, python: str) -> Path:
    """The peer venv's python, creating / installing it when its pinned set differs."""
    py = venv / "bin" / "python"
    marker = venv / ".peer_requirements"
    want = "\n".join(PEER_REQUIREMENTS)
    if py.exists() and marker.exists() and marker.read_text() == want:
        return py
    print(f"creating {venv} and installing {' '.join(PEER_REQUIREMENTS)}", flush=True)
    r = subprocess.run([python, "-m", "venv", "--clear", str(venv)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise PeerError(f"could not create the venv {venv}: {_last_line(r.stderr + r.stdout)}")
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise PeerError("pip install of FedJAX's pinned set failed: "
                        + _last_line(r.stderr + r.stdout))
    r = subprocess.run([str(py), "-c", "import fedjax, haiku, jax"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise PeerError(f"fedjax does not import in {venv}: {_last_line(r.stderr)}")
    marker.write_text(want)
    return py


def run_peer(py: Path, tmp: Path, npz: Path, cohort: int, repeats: int, cfg) -> dict:
    worker = tmp / "fedjax_worker.py"
    worker.write_text(WORKER)
    out = tmp / f"fedjax_{cohort}.json"
    r = subprocess.run([str(py), str(worker), str(npz), str(out), str(cohort), str(repeats),
                        str(float(HP.client_lr)), str(cfg.local_steps), str(cfg.batch_size),
                        str(cfg.seed)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": ""})
    if r.returncode != 0 or not out.exists():
        raise PeerError(f"the FedJAX worker failed (cohort {cohort}): "
                        f"{_last_line(r.stderr + r.stdout)}")
    return json.loads(out.read_text())


def save_clients(data, ds, path: Path) -> None:
    tr = data.train
    np.savez(path, x=np.asarray(tr.x), y=np.asarray(tr.y), offset=np.asarray(tr.offset),
             count=np.asarray(tr.count), scale=float(ds.scale),
             mean=float(np.asarray(ds.mean)), std=float(np.asarray(ds.std)))


def record_failure(args, msg: str) -> None:
    write_json(Path(args.out), {"machine": machine(), "workload": WORKLOAD, "error": msg,
                                "peer_requirements": PEER_REQUIREMENTS})
    if not args.no_append:
        append_results("FedJAX 0.0.17 vs ours, FedAvg s/round — FAILED",
                       f"FedJAX could not be measured: {msg}",
                       "Pinned set: " + " ".join(PEER_REQUIREMENTS) + ".")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohorts", default="10,100")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds / calls per side")
    ap.add_argument("--venv", default=str(PEER_VENV))
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter that creates the peer venv (Python 3.11 tested)")
    ap.add_argument("--fmnist-dir", default=FMNIST_DIR)
    ap.add_argument("--no-append", action="store_true",
                    help="do not append a section to benchmarks/RESULTS.md (smoke tests)")
    ap.add_argument("--out", default=str(HERE / "results" / "peer_fedjax.json"))
    args = ap.parse_args()

    try:
        py = ensure_venv(Path(args.venv), args.python)
    except PeerError as e:
        record_failure(args, str(e))
        sys.exit(f"peer_fedjax: {e}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="peer_fedjax_") as tmpdir:
        tmp = Path(tmpdir)
        for m in [int(c) for c in args.cohorts.split(",")]:
            cfg = workload(m, fmnist_dir=args.fmnist_dir)
            rpc = 4 if m <= 10 else (2 if m <= 100 else 1)
            secs, compile_s, data, ds, _ = jax_round_times(cfg, HP, rpc, args.repeats)
            npz = tmp / f"clients_{cfg.clients}.npz"
            if not npz.exists():
                save_clients(data, ds, npz)
            try:
                peer = run_peer(py, tmp, npz, m, args.repeats, cfg)
            except PeerError as e:
                record_failure(args, str(e))
                sys.exit(f"peer_fedjax: {e}")
            ratio = float(np.median(peer["secs"]) / np.median(secs))
            rows.append({"cohort": m, "clients": cfg.clients, "ours": stats(secs),
                         "ours_compile_s": compile_s, "ours_rounds_per_call": rpc,
                         "fedjax": stats(peer["secs"]),
                         "fedjax_first_round_s": peer["first_round_s"],
                         "fedjax_params_finite": peer["params_finite"],
                         "fedjax_train_acc_after": peer["train_acc"],
                         "fedjax_rounds_done": 1 + args.repeats,
                         "fedjax_jax": peer["jax"], "fedjax_backend": peer["backend"],
                         "ratio_median": ratio,
                         "ratio_min": float(min(peer["secs"]) / min(secs))})
            print(f"cohort {m:4d}: ours {min(secs):.3f} / {np.median(secs):.3f} s/round, "
                  f"FedJAX {min(peer['secs']):.3f} / {np.median(peer['secs']):.3f} s/round "
                  f"(min/median) -> ours {ratio:.2f}x faster (median)", flush=True)

    result = {"machine": machine(), "backend": jax.default_backend(), "workload": WORKLOAD,
              "peer": "fedjax 0.0.17", "peer_requirements": PEER_REQUIREMENTS,
              "repeats": args.repeats, "rows": rows, "target_ratio": TARGET}
    write_json(Path(args.out), result)
    lines = ["| cohort | clients | ours s/round (min / median) | compile s | FedJAX s/round "
             "(min / median) | FedJAX first round s | FedJAX / ours (median) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['cohort']} | {r['clients']} | {r['ours']['min']:.3f} / "
                     f"{r['ours']['median']:.3f} | {r['ours_compile_s']:.1f} | "
                     f"{r['fedjax']['min']:.3f} / {r['fedjax']['median']:.3f} | "
                     f"{r['fedjax_first_round_s']:.1f} | {r['ratio_median']:.2f}× |")
    verdicts = ", ".join(f"cohort {r['cohort']}: {r['ratio_median']:.2f}x "
                         f"({'meets' if r['ratio_median'] >= TARGET else 'MISSES'})"
                         for r in rows)
    notes = (f"Workload: {WORKLOAD}, 100 clients, identical client arrays on both sides. "
             f"FedJAX 0.0.17 on jax {rows[0]['fedjax_jax'] if rows else '?'} "
             f"({rows[0]['fedjax_backend'] if rows else '?'}), default for_each_client "
             f"backend (jit); ours on jax {jax.__version__} ({jax.default_backend()}). "
             f"Repeats: {args.repeats} per side. FedJAX's global model after its "
             f"{1 + args.repeats} rounds (sanity check that it trains): train accuracy "
             + ", ".join(f"{100 * r['fedjax_train_acc_after']:.1f}% (cohort {r['cohort']})"
                         for r in rows) + f". Target ours >= {TARGET:g}x faster: {verdicts}.")
    if not args.no_append:
        append_results(f"FedJAX 0.0.17 vs ours, FedAvg s/round ({jax.default_backend()})",
                       "\n".join(lines), notes)
    print("\n".join(lines))
    print(notes)


if __name__ == "__main__":
    main()
