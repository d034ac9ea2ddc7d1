"""One configured run end to end: data -> model -> algorithm -> simulation -> results dict."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from .. import __version__
from ..aggregate.accounting import OPTIONS as ACCOUNTING
from ..aggregate.accounting import summary as privacy_summary
from ..core.arrays import FederatedData
from ..core.capabilities import supports
from ..core.config import ConfigError, HParams, RunConfig
from ..core.memo import shared
from ..data import Dataset
from ..evaluate.text_baselines import text_baselines
from ..execute.distributed import fetch, make_mesh
from ..execute.layout import resolve_layout
from ..execute.programs import ProgramCache
from ..execute.runtime import release_programs_if_crowded, runtime_record
from ..protocols.appeal.appeal import OPTIONS as APPEAL
from ..protocols.appeal.appeal import personalize
from ..protocols.appeal.requirement import appeal_on, appeal_reason
from .assemble import assemble, program_context
from .checkpoint import FILE, Checkpointer, check_compatible, read_meta
from .diskspace import WriteFailed
from .progress import phase
from .publish import covered_entry, restrict
from .records import recorded_config, recorded_hparams
from .simulate import SimulationResult, simulate
from .validate import validate


def finetune_report(model, cfg: RunConfig, sim: SimulationResult, data: FederatedData,
                    hp: HParams) -> dict[str, Any] | None:
    """Personalization after training (`appeal.personalize`): scalars go into the last
    history entry, and the whole block (with per-client arrays) is returned."""
    if cfg.finetune_steps <= 0 or not sim.history:
        return None
    t0 = time.perf_counter()
    key = jax.random.fold_in(jax.random.key(cfg.seed), 2)
    st = sim.final_state
    args = (st.params, st.model_state, st.protocol, data, key, hp.as_arrays())
    # one jitted function per model and options, of what it reads of the final state: a
    # later run of the same shapes (another arm, another seed) reuses its trace, lowering
    # and executable
    program = personalizer(model, cfg.view(APPEAL, "the appeal protocol")).lower(
        *args).compile()
    t1 = time.perf_counter()
    out = fetch(program(*args))
    block = {k: (float(v) if np.ndim(v) == 0 else np.asarray(v).tolist())
             for k, v in out.items()}
    sim.history[-1].update({k: v for k, v in block.items() if isinstance(v, float)})
    sim.timing["finetune_compile_s"] = t1 - t0
    sim.timing["finetune_s"] = time.perf_counter() - t0
    return {"finetune_steps": cfg.finetune_steps, "round": sim.history[-1]["round"], **block}


class FinalModel(NamedTuple):
    """What `appeal.personalize` reads of the final server state."""

    params: Any
    model_state: Any
    protocol: Any  # the appeal protocol's `AppealState` (solo statistics, requirements)


@shared
def personalizer(model, opts):
    """`appeal.personalize` of this model and appeal options as a jitted function of
    (params, model_state, appeal info, data, key, hp), the same for every algorithm; one
    function per value of its arguments (`core.memo.shared`)."""
    def personalized(params, model_state, info, data, key, hp):
        return personalize(model, opts, FinalModel(params, model_state, info),
                           data, key, hp)

    return jax.jit(personalized)


class Prepared(NamedTuple):
    """What a caller of `run_config` did already: validated the configuration and its
    hyperparameters, resolved the layout (`run_layout`) and built the model."""

    layout: Any
    model: Any


def run_config(cfg: RunConfig, hp: HParams, *, data: FederatedData | None = None,
               dataset: Dataset | None = None,
               on_eval: Callable[[dict[str, float]], None] | None = None,
               program_cache: str | Path | None = None, prepared: Prepared | None = None,
               heartbeat=None) -> tuple[dict[str, Any], SimulationResult]:
    """Run `cfg` with hyperparameters `hp`; returns (results dict, raw simulation result).

    `data`/`dataset` reuse an already loaded federation (same partition for several
    algorithms); otherwise the data are loaded and partitioned from `cfg` (seeded).
    The results' `config` holds the resolved model and appeal setting and `hparams` the
    hyperparameters the configuration uses (`records.recorded_config`,
    `records.recorded_hparams`). `program_cache`: a folder of compiled programs
    (`execute.programs.ProgramCache`); a program compiled there before for the same
    configuration, data and code is read back instead of traced and compiled.
    `prepared`: what the caller already did with this `cfg` and `hp` (`Prepared`: validated
    them, resolved the layout, built the model), so that a command line checks and builds
    each once. `heartbeat`: a `progress.Heartbeat` told each step of the run (loading the
    data, compiling, training), so that a long step gets a line every few seconds.
    """
    if prepared is None:
        validate(cfg, hp)
    release_programs_if_crowded()  # a long process must not run out of memory mappings
    dp_restricted = cfg.dp != "off" and not cfg.dp_publish_client_stats
    if dp_restricted and on_eval is not None:  # progress shows only what may be published
        shown = on_eval
        on_eval = lambda entry: shown(covered_entry(entry))
    if prepared is None:
        cfg, layout = run_layout(cfg)  # the layout is decided once, here
    else:
        cfg, layout = cfg, prepared.layout
    ckpt, mesh = _scale_options(cfg, hp)  # ... and the mesh built once
    with phase(heartbeat, loading_phase(cfg) if data is None else "building the algorithm"):
        alg, model, data, dataset, load_s = assemble(
            cfg, data=data, dataset=dataset, mesh=mesh,
            model=None if prepared is None else prepared.model)
    programs = None
    if program_cache:
        programs = ProgramCache(program_cache, program_context(cfg, model, data))
    sim = simulate(alg, data, hp, jax.random.key(cfg.seed), rounds=cfg.rounds,
                   eval_every=cfg.eval_every, on_eval=on_eval, checkpoint=ckpt,
                   resume=bool(cfg.resume), mesh=mesh, programs=programs,
                   heartbeat=heartbeat)
    with phase(heartbeat, "fine-tuning every client (personalised evaluation)"):
        personalized = finetune_report(model, cfg, sim, data, hp) if appeal_on(cfg) else None
    results = {
        "config": recorded_config(cfg, model.name),
        "appeal_protocol": {"on": appeal_on(cfg), "why": appeal_reason(cfg)},
        "hparams": recorded_hparams(cfg, hp),
        "data": {"clients": data.num_clients, "unseen_clients": data.num_unseen,
                 "train_samples": data.train.owned_rows(), "test_samples": data.test.owned_rows(),
                 "num_classes": data.num_classes, "input_shape": list(data.input_shape)},
        **({"baselines": text_baselines(data)} if data.vocab_size else {}),  # token tasks
        "history": sim.history,
        "timing": {**sim.timing, "load_s": load_s},
        "round_metrics": {k: v.tolist() for k, v in sim.round_metrics.items()},
        "participation": np.asarray(fetch(sim.final_state.participation)).tolist(),
        "final_clients": sim.final_eval,
        **({"personalized": personalized} if personalized else {}),
        **({"privacy": privacy_summary(cfg.view(ACCOUNTING, "the privacy accounting"), hp,
                                      data.num_clients, cfg.rounds)}
           if cfg.dp != "off" else {}),
        "layout": {**layout._asdict(), "conv_impl": getattr(model.module, "conv_impl", None)},
        "runtime": {**runtime_record(),
                    "program_cache": None if programs is None else str(programs.folder)},
        "environment": {"fedjax_appeal": __version__, "jax": jax.__version__,
                        "backend": jax.default_backend(), "devices": jax.device_count(),
                        "python": platform.python_version(),
                        "machine": platform.machine()},
    }
    if cfg.dp != "off":  # only what the guarantee covers, unless asked
        results = restrict(results, cfg.dp_publish_client_stats)
    return results, sim


def loading_phase(cfg: RunConfig) -> str:
    """What a heartbeat line says while `cfg`'s data load and partition (`progress`)."""
    return (f"loading the data ({cfg.dataset}, {cfg.partition} partition over "
            f"{cfg.clients + cfg.unseen_clients} clients)")


def run_layout(cfg: RunConfig):
    """(cfg with its layout resolved, `layout.Layout`): see execute/layout.py."""
    return resolve_layout(cfg, algorithm_layouts=supports(cfg.algorithm).layouts)


def _scale_options(cfg: RunConfig, hp: HParams):
    """(Checkpointer or None, mesh or None) of a run (see checkpoint.py, distributed.py)."""
    if cfg.resume:
        check_compatible(read_meta(cfg.resume), cfg.as_dict(), hp.to_dict(),
                         cfg.resume)
    return checkpointer(cfg, hp), make_mesh(cfg.devices)


def checkpointer(cfg: RunConfig, hp: HParams):
    """The `Checkpointer` of a run (None without an output folder)."""
    directory = cfg.resume or cfg.out
    if not directory:
        return None
    return Checkpointer(Path(directory), cfg.checkpoint_every,
                        {"config": cfg.as_dict(), "hparams": hp.to_dict(),
                         "seed": cfg.seed})


def keep_final_state(cfg: RunConfig, hp: HParams, sim: SimulationResult) -> str:
    """After the results could not be written: make sure a checkpoint of the last round is
    on disk (written now unless the run already took it); returns where the finished work
    is, for the error message."""
    ckpt = checkpointer(cfg, hp)
    last = int(sim.history[-1]["round"]) if sim.history else 0
    try:
        done = (ckpt.path.is_file() and int(read_meta(ckpt.directory)["round"]) == last)
    except ConfigError:
        done = False
    if not done:
        try:
            ckpt.save(sim.final_state, last, sim.history, sim.round_metrics)
        except WriteFailed:
            return ("the trained state could not be kept either (no space for a checkpoint); "
                    "free space and run again")
    return (f"the trained state of round {last} is kept in {ckpt.directory / FILE}: free "
            f"space, then --resume {ckpt.directory} writes the results without training")
