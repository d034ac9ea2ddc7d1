"""The plain `fedjax-appeal run`, as a user types it, against each peer: one interleaved
run, written as the table at the top of benchmarks/RESULTS.md.

Workload (`round_throughput.workload`): FedAvg, Fashion-MNIST Dirichlet(0.5), 100
clients, MLP [64, 30] with dropout, tau = 50 local SGD steps of batch 64, client lr 0.05;
cohorts 10 and 100. Sides, each timed once per repeat, in turn:

  * `fedjax-appeal run` with the workload's flags and nothing else (the automatic layout
    decides devices and lanes), in a fresh process; its s/round is the median over the
    run's chunks of rounds (`results.json` timing; compile and evaluation apart), and the
    process's wall time is reported too.
  * the same command with `--layout manual` (one device, one vmap: the layout a run had
    before the automatic one).
  * a plain JAX program (`jax_prototype.py`, about 100 lines: vmap over the cohort, scan
    over local steps, one jit per round) in this process.
  * PyTorch (`torch_peer.py`), in this process, when torch is installed, on the GPU when
    torch sees one: the plain loop (`load_state_dict` variant; on the CPU threads the
    faster of 1 and all cores) and any other variants of `--torch-variants`, e.g. the
    cohort's weights batched into one matmul per layer (`batched`) and that program
    captured in a CUDA graph (`graph`, GPU only): the strongest PyTorch programs.
  * FedJAX 0.0.17 (`--fedjax`; its own venv, see `peer_fedjax.py`): its worker per repeat,
    timing rounds after a warm-up round.

Reported: min / median s/round per side and each peer's median over the plain command's
median (higher = the plain command is faster).

    python benchmarks/plain_command.py --cohorts 10,100 --repeats 3 --fedjax
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, command, machine, stats, write_json  # noqa: E402
from jax_prototype import prototype_round  # noqa: E402
from round_throughput import FMNIST_DIR, HP, WORKLOAD, pick_threads, workload  # noqa: E402

from fedjax_appeal.data import load_federated  # noqa: E402

ROUNDS = {10: 24, 100: 8}  # rounds per command: chunks of 2 (cohort 100) or 4 rounds
TOP_BEGIN = "<!-- plain-command table: written by benchmarks/plain_command.py -->"
TOP_END = "<!-- end of plain-command table -->"


def command_flags(cohort: int, fmnist_dir: str) -> list[str]:
    """The flags a user types for the workload (nothing about layout)."""
    rounds = ROUNDS.get(cohort, 4)
    every = 4 if cohort <= 10 else 2
    return ["run", "--dataset", "fmnist", "--fmnist-dir", fmnist_dir, "--partition",
            "dirichlet", "--alpha", "0.5", "--clients", "100", "--unseen-clients", "0",
            "--cohort", str(cohort), "--local-steps", "50", "--batch-size", "64",
            "--client-lr", str(float(HP.client_lr)), "--rounds", str(rounds), "--eval-every",
            str(every), "--no-appeal"]


def run_command(flags: list[str], out: Path) -> dict:
    """One `fedjax-appeal run` in a fresh process: s/round (median of its chunks), wall s."""
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "fedjax_appeal", *flags, "--out", str(out),
                        "--overwrite"], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"plain_command: the command failed: {r.stderr.strip().splitlines()[-1]}")
    res = json.loads((out / "results.json").read_text())
    return {"s_round": res["timing"]["sec_per_round"], "wall_s": wall,
            "compile_s": res["timing"]["compile_s"], "eval_s": res["timing"]["eval_s"],
            "layout": res.get("layout", {}),
            "acc": res["history"][-1].get("test_acc_seen")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohorts", default="10,100")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fedjax", action="store_true", help="also FedJAX 0.0.17 (own venv)")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    ap.add_argument("--torch-variants", default="loop",
                    help="comma list of torch_peer variants (loop, func, vmap, dataloader, "
                         "batched, graph; graph needs CUDA)")
    ap.add_argument("--fmnist-dir", default=FMNIST_DIR)
    ap.add_argument("--no-write", action="store_true",
                    help="do not write the table into benchmarks/RESULTS.md (smoke tests)")
    ap.add_argument("--out", default=str(HERE / "results" / "plain_command.json"))
    args = ap.parse_args()

    torch_ok = not args.no_torch
    if torch_ok:
        try:
            import torch  # noqa: F401
            from torch_peer import make_torch_round
        except ImportError:
            torch_ok = False
            print("plain_command: torch is not installed; no PyTorch column", flush=True)
    fedjax_py = None
    if args.fedjax:
        from peer_fedjax import PEER_VENV, PeerError, ensure_venv, run_peer, save_clients

        try:
            fedjax_py = ensure_venv(PEER_VENV, sys.executable)
        except PeerError as e:
            sys.exit(f"plain_command: FedJAX: {e}")

    rows = []
    with tempfile.TemporaryDirectory(prefix="plain_command_") as tmpdir:
        tmp = Path(tmpdir)
        for m in [int(c) for c in args.cohorts.split(",")]:
            cfg = workload(m, fmnist_dir=args.fmnist_dir)
            data, ds = load_federated(cfg)
            sides: dict[str, list[float]] = {"plain": [], "manual": [], "prototype": []}
            wall: dict[str, list[float]] = {"plain": [], "manual": []}
            evals: dict[str, list[float]] = {"plain": [], "manual": []}
            info: dict[str, dict] = {}
            proto = prototype_round(data, ds, cfg, float(HP.client_lr))
            proto()  # compile
            torch_rounds = {}
            if torch_ok:
                import torch

                device = "cuda" if torch.cuda.is_available() else "cpu"
                for v in [v.strip() for v in args.torch_variants.split(",") if v.strip()]:
                    threads = (pick_threads(data, ds, cfg, HP, device, v, "auto")
                               if device == "cpu" else None)
                    side = torch_side(v)
                    torch_rounds[side] = make_torch_round(data, ds, cfg, HP, device, v,
                                                          threads)
                    torch_rounds[side]()  # warm-up (and the CUDA graph's capture)
                    sides[side] = []
                    info[side] = {"threads": threads, "device": device}
            npz = None
            if fedjax_py is not None:
                npz = tmp / f"clients_{m}.npz"
                save_clients(data, ds, npz)
                sides["fedjax"] = []
            flags = command_flags(m, args.fmnist_dir)
            for rep in range(args.repeats):
                for name, extra in (("plain", []), ("manual", ["--layout", "manual"])):
                    got = run_command(flags + extra, tmp / f"{name}_{m}")
                    sides[name].append(got["s_round"])
                    wall[name].append(got["wall_s"])
                    evals[name].append(got["eval_s"])
                    info[name] = got
                t = time.perf_counter()
                proto()
                sides["prototype"].append(time.perf_counter() - t)
                for side, torch_round in torch_rounds.items():
                    t = time.perf_counter()
                    torch_round()
                    sides[side].append(time.perf_counter() - t)
                if npz is not None:
                    try:
                        peer = run_peer(fedjax_py, tmp, npz, m, 2, cfg)
                    except PeerError as e:
                        sys.exit(f"plain_command: FedJAX: {e}")
                    sides["fedjax"].append(float(np.median(peer["secs"])))
                print(f"cohort {m} repeat {rep + 1}: " + ", ".join(
                    f"{k} {v[-1]:.3f}" for k, v in sides.items()), flush=True)
            base = float(np.median(sides["plain"]))
            rows.append({"cohort": m, "sides": {k: stats(v) for k, v in sides.items()},
                         "wall": {k: stats(v) for k, v in wall.items()},
                         "eval": {k: stats(v) for k, v in evals.items()},
                         "ratio": {k: float(np.median(v)) / base for k, v in sides.items()},
                         "layout": info["plain"]["layout"], "info": info})

    result = {"machine": machine(), "backend": jax.default_backend(), "workload": WORKLOAD,
              "repeats": args.repeats, "rows": rows, "command": command()}
    write_json(Path(args.out), result)
    table = render(result)
    print(table)
    if not args.no_write:
        write_top(table)


LABELS = {"plain": "`fedjax-appeal run` (plain)", "manual": "… `--layout manual`",
          "prototype": "plain JAX program", "torch": "PyTorch loop", "fedjax": "FedJAX 0.0.17"}


def torch_side(variant: str) -> str:
    """The side a torch_peer variant is reported as ("torch" for the plain loop)."""
    return "torch" if variant == "loop" else f"torch_{variant}"


def label(side: str) -> str:
    if side in LABELS:
        return LABELS[side]
    from torch_peer import LABELS as TORCH

    return "PyTorch: " + TORCH[side.removeprefix("torch_")]


def render(result: dict) -> str:
    """The top table of RESULTS.md: s/round per side and each side's ratio to the plain
    command, one row per cohort."""
    import datetime as _dt

    seen = list(dict.fromkeys(n for r in result["rows"] for n in r["sides"]))
    names = [n for n in LABELS if n in seen] + [n for n in seen if n not in LABELS]
    head = ("| cohort | layout chosen | " + " | ".join(
        f"{label(n)} s/round (min / median; × plain)" for n in names) + " |")
    lines = [head, "|" + "---|" * (2 + len(names))]
    for r in result["rows"]:
        lay = r["layout"]
        chosen = (f"{lay.get('devices')} device(s), lanes {lay.get('client_lanes')}"
                  if lay else "—")
        cells = []
        for n in names:
            s = r["sides"].get(n)
            cells.append("—" if s is None else
                         f"{s['min']:.3f} / {s['median']:.3f}; {r['ratio'][n]:.2f}×")
        lines.append(f"| {r['cohort']} | {chosen} | " + " | ".join(cells) + " |")
    evals = "; ".join(f"cohort {r['cohort']}: plain {r['eval']['plain']['median']:.3f} s, "
                      f"manual (one device) {r['eval']['manual']['median']:.3f} s"
                      for r in result["rows"] if "eval" in r)
    walls = "; ".join(f"cohort {r['cohort']}: plain {r['wall']['plain']['median']:.1f} s, "
                      f"manual {r['wall']['manual']['median']:.1f} s" for r in result["rows"])
    return (f"{TOP_BEGIN}\n## The plain command against its peers — "
            f"{_dt.date.today().isoformat()}\n\n"
            f"- machine: {result['machine']}\n- load average at the end (1, 5, 15 min): "
            + ", ".join(f"{x:.1f}" for x in os.getloadavg())
            + f"\n- command: `{result['command']}`\n\n" + "\n".join(lines)
            + f"\n\nWorkload: {result['workload']}, 100 clients; {result['repeats']} "
            "interleaved repeats (every side once per repeat). × plain = that side's median "
            "over the plain command's median (above 1: the plain command is faster). The "
            "plain command's s/round is the median of its chunks of rounds, compile and "
            f"evaluation apart; whole-process wall time (median): {walls}. Evaluation of every "
            f"client's test rows (median s per evaluation, from results.json): {evals}."
            f"\n{TOP_END}\n")


def write_top(table: str) -> None:
    """Replace the plain-command table at the top of RESULTS.md (after its title)."""
    from _common import RESULTS_MD

    text = RESULTS_MD.read_text() if RESULTS_MD.exists() else "# Benchmark results\n"
    if TOP_BEGIN in text and TOP_END in text:
        a = text.index(TOP_BEGIN)
        b = text.index(TOP_END) + len(TOP_END) + 1
        text = text[:a] + table + text[b:]
    else:
        title_end = text.index("\n") + 1
        text = text[:title_end] + "\n" + table + text[title_end:]
    tmp = RESULTS_MD.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, RESULTS_MD)


if __name__ == "__main__":
    main()
