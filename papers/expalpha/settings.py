"""The RunConfig and HParams of an Exp-alpha run in a context: compute profile (`--set
profile=cpu|gpu`), schedule (with the --quick and (E, t) grid overrides), targets,
model, backbones and seeds of each setting (from `papers.expalpha.specs`)."""

from __future__ import annotations

from typing import Any

from fedjax_appeal import ConfigError, HParams, RunConfig
from papers.expalpha.specs import (
    ALPHA,
    BACKBONES,
    BY_LABEL,
    CLIENT_LR,
    DOMAIN_BACKBONES,
    DOMAIN_TARGETS,
    MODELS,
    QUICK_BACKBONES,
    SCHEDULES,
    TARGETS,
    Backbone,
)
from papers.reproduce import Context


def profile(ctx: Context) -> str:
    """The compute profile: `reproduce NAME --set profile=gpu` (default cpu)."""
    p = ctx.option("profile", "cpu") or "cpu"
    if p not in MODELS:
        raise ConfigError(f"--set profile={p}: the profile must be cpu or gpu")
    return p


def schedule(ctx: Context, setting: str, grid: tuple[int, int] | None = None
             ) -> dict[str, Any]:
    """RunConfig keys of a setting in the context's profile (with the --quick overrides);
    `grid` = (E, t) replaces local steps and rounds."""
    s = dict(SCHEDULES[profile(ctx)][setting])
    if grid is not None:
        e, t = grid
        s.update(local_steps=e, rounds=t, eval_every=max(1, t // 50))
    if ctx.quick:
        s.update(SCHEDULES["quick"][setting])
    return s


def targets(ctx: Context, setting: str) -> tuple[float, ...]:
    return DOMAIN_TARGETS if setting == "domain" else TARGETS[profile(ctx)]


def model_for_backbone(ctx: Context, b: Backbone, setting: str) -> str:
    """`mlp` (cpu, FMNIST) or `resnet20` (gpu, CIFAR-10); `cnn_bn` for every Digits run;
    `--set model=NAME` replaces the model of the other settings."""
    if setting == "domain":
        return "cnn_bn"
    plain, bn = MODELS[profile(ctx)]
    return ctx.option("model") or (bn if b.bn else plain)


def backbones(ctx: Context, setting: str) -> list[Backbone]:
    key = setting.removesuffix("-random")
    if ctx.quick and key in QUICK_BACKBONES:
        return [BY_LABEL[n] for n in QUICK_BACKBONES[key]]
    if setting == "domain":  # the paper's Table 3 rows (FedAvg, FedBN) and FedFor
        return [BY_LABEL[n] for n in DOMAIN_BACKBONES]
    return list(BACKBONES)


def seeds_of(ctx: Context) -> list[int]:
    return ctx.seeds[:1] if ctx.quick else list(ctx.seeds)


def make_cfg(ctx: Context, setting: str, seed: int, b: Backbone, aggregation: str,
             grid: tuple[int, int] | None = None) -> RunConfig:
    return ctx.base(**schedule(ctx, setting, grid), algorithm=b.algorithm,
                    server_opt=b.server_opt, aggregation=aggregation,
                    model=model_for_backbone(ctx, b, setting), unseen_clients=0, appeal="off",
                    seed=seed)


def make_hp(ctx: Context, b: Backbone | None = None, **kw) -> HParams:
    return HParams(**{"client_lr": CLIENT_LR[profile(ctx)], "exp_alpha": ALPHA,
                      **(b.hp if b is not None else {}), **kw})
