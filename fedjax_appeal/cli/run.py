"""`fedjax-appeal run`: one simulation, checked before anything is loaded, its results
written into its output folder."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from .. import data as data_layer  # load_federated through it: tests replace it
from ..aggregate.accounting import HEADER_OPTIONS as ACCOUNTING
from ..aggregate.accounting import header as dp_header
from ..core.config import ConfigError, RunConfig
from ..core.models import model_for
from ..data.text import tokenizer_writers
from ..execute.distributed import check_processes, is_main
from ..execute.layout import LAYOUT_FIELDS, conv_impl_for
from ..execute.runtime import program_cache_folder
from ..protocols.appeal.requirement import appeal_reason
from ..run import experiment, report  # run_config, write_outputs: tests replace them
from ..run.checkpoint import check_compatible, read_meta, resume_base
from ..run.diskspace import WriteFailed, reason
from ..run.experiment import Prepared, keep_final_state, loading_phase
from ..run.experiment import run_layout as experiment_layout
from ..run.export import model_writers
from ..run.outlock import out_lock
from ..run.progress import Heartbeat, phase
from ..run.records import headline, recorded_config, recorded_hparams
from ..run.report import prefetch_plotting, run_writers
from ..run.simulate import progress_printer
from ..run.tracking import LOG_DIR, Tracker, parse_kinds
from ..run.validate import RUN_FILES, check_ignored, check_source_size, validate
from ..run.wallclock import command_split, split_text
from .commands import Subcommand
from .options import add_config_flags, default_out, given_keys, resolve
from .process import add_process_flags, clear_old_run, peer_advice, prepare_out


def subcommand() -> Subcommand:
    return Subcommand(lambda p: (add_config_flags(p), add_process_flags(p)), cmd_run,
                      "run one simulation and write its results")


def cmd_run(args: argparse.Namespace) -> int:
    cfg, hp = resolve(args, base=resume_base(getattr(args, "resume", "")))
    if not cfg.out:
        cfg = cfg.replace(out=default_out(cfg))
    validate(cfg, hp)
    if cfg.resume:  # the checkpoint's configuration must be this one (before any loading)
        meta = read_meta(cfg.resume)
        check_compatible(meta, cfg.as_dict(), hp.to_dict(), cfg.resume)
        if cfg.rounds < int(meta["round"]):
            raise ConfigError(f"--rounds {cfg.rounds} is below round {meta['round']} of the "
                              f"checkpoint in {cfg.resume}: a resumed run continues from it; "
                              f"give --rounds {meta['round']} or more")
    check_ignored(cfg, given_keys(args))
    check_source_size(cfg)
    cfg, layout = run_layout(cfg, given_keys(args))
    check_processes(cfg.devices)
    prepare_out(cfg.out, RUN_FILES, args, cfg.resume)
    peer_advice(cfg.resume or cfg.out, cfg.checkpoint_every)
    with out_lock(cfg.out):  # one run per folder
        return _run_locked(args, cfg, hp, layout)


def run_layout(cfg: RunConfig, given: set[str]):
    """(cfg, Layout) with the layout resolved (`experiment.run_layout`); a layout field
    given on the command line or in the config file makes the layout manual."""
    if "layout" not in given and given & set(LAYOUT_FIELDS):
        cfg = cfg.replace(layout="manual")
    return experiment_layout(cfg)


def _run_locked(args: argparse.Namespace, cfg, hp, layout) -> int:
    """`cmd_run` once the configuration is checked and the output folder is ours."""
    main = is_main()
    # a line every few seconds while a step lasts long (process 0 speaks for the job)
    heartbeat = Heartbeat(lambda msg: print(f"fedjax-appeal: {msg}", file=sys.stderr,
                                            flush=True)) if main else None
    with heartbeat or contextlib.nullcontext():
        return _run_with(args, cfg, hp, layout, heartbeat)


def _run_with(args: argparse.Namespace, cfg, hp, layout, heartbeat) -> int:
    """`_run_locked` with its heartbeat (None in the processes other than 0)."""
    main = is_main()
    t0 = time.perf_counter()
    with phase(heartbeat, loading_phase(cfg)):
        data, dataset = data_layer.load_federated(cfg)  # data problems surface before any output
    load_s = time.perf_counter() - t0
    # ... and a model that misfits; built as the run builds it (`assemble`)
    model = model_for(cfg.model, data, dataset, conv_impl_for(cfg), cfg.precision)
    if getattr(args, "overwrite", False):
        clear_old_run(cfg.out, RUN_FILES)
    if main:
        print(f"fedjax-appeal: {cfg.algorithm} on {cfg.dataset} ({cfg.partition}), "
              f"{data.num_clients} clients + {data.num_unseen} unseen, cohort {cfg.cohort}, "
              f"{cfg.rounds} rounds, {appeal_reason(cfg)} -> {cfg.out}", file=sys.stderr)
        conv = getattr(model.module, "conv_impl", None)
        print(f"fedjax-appeal: {layout.describe()}"
              + (f"; convolutions: {conv}" if conv else ""), file=sys.stderr)
        if cfg.dp != "off":
            line = dp_header(cfg.view(ACCOUNTING, "the privacy accounting"), hp,
                             data.num_clients)
            print(f"fedjax-appeal: {line}", file=sys.stderr)
        if heartbeat is not None:
            heartbeat.mark()
    tracker = None
    if main and cfg.log:
        tracker = Tracker(parse_kinds(cfg.log), Path(cfg.out) / LOG_DIR,
                          Path(cfg.out).name, recorded_config(cfg, model.name),
                          recorded_hparams(cfg, hp))
    printer = progress_printer(cfg.algorithm, cfg.rounds) if main else None
    if printer is not None and heartbeat is not None:  # its lines count as progress
        shown = printer
        printer = lambda entry: (shown(entry), heartbeat.mark())  # noqa: E731
    if main:
        prefetch_plotting()
    try:
        results, sim = experiment.run_config(
            cfg, hp, data=data, dataset=dataset,
            on_eval=(printer if tracker is None else lambda e: (printer(e), tracker.eval(e))),
            program_cache=program_cache_folder(), prepared=Prepared(layout, model),
            heartbeat=heartbeat)
    except BaseException:
        if tracker is not None:
            tracker.close()
        raise
    if tracker is not None:
        tracker.finish(results["round_metrics"], results["history"][-1])
    if not main:  # the other processes computed the same results; process 0 writes them
        return 0
    title = f"{cfg.algorithm} on {cfg.dataset} ({cfg.partition})"
    clock = getattr(args, "clock", None)
    t = results["timing"]
    if clock is not None:  # the process up to the writing of the results
        results["timing"]["process"] = command_split(clock, t["train_total_s"],
                                                     t["eval_total_s"], load_s)
    try:
        with phase(heartbeat, f"writing the results into {cfg.out}"):
            out = report.write_outputs(cfg.out, {**run_writers(results, title),
                                                 **model_writers(model, sim.final_state.params,
                                                                 sim.final_state.model_state),
                                                 **tokenizer_writers(dataset)})
    except OSError as e:
        raise WriteFailed(f"could not write the results to {cfg.out} ({reason(e)}); "
                          f"{keep_final_state(cfg, hp, sim)}") from None
    last = results["history"][-1]
    empty = sum(1 for a in results["round_metrics"].get("available", []) if a == 0)
    if empty:
        print(f"fedjax-appeal: warning: {empty} of {cfg.rounds} rounds had no available client "
              "(flexible participation: the global model appealed to nobody), so the model did "
              "not change in them; see round_metrics.available in results.json",
              file=sys.stderr)
    acc = last.get("test_acc_seen", float("nan"))
    spr = t.get("sec_per_round")
    print(f"final round {last['round']}: test_acc_seen {acc:.4f}"
          + (f"  test_acc_unseen {last['test_acc_unseen']:.4f}" if "test_acc_unseen" in last
             else "") + headline(cfg, last)
          + (f"  ({spr:.4f} s/round, " if spr is not None else "  (no round trained, ")
          + f"compile {t['compile_s']:.1f}s); wrote {out}/results.json, history.csv, "
          "accuracy.png, model.msgpack (load_model)")
    if clock is not None:
        print_split(clock, t["train_total_s"], t["eval_total_s"], load_s)
    return 0


def print_split(clock, train_s: float, eval_s: float, data_s: float) -> None:
    """The last line of a command: where its wall time went (`run.wallclock`)."""
    s = command_split(clock, train_s, eval_s, data_s)
    print(split_text(s, s["programs"]), file=sys.stderr)

