"""The MaxFL (Cho et al., TMLR, "Maximizing Global Model Appeal in Federated Learning") and
IncFL tables as data: settings, arms, metrics, the papers' numbers and notes.

Every table is a grid: settings (a dataset setting) x arms (an algorithm with its options)
x seeds, run by `papers.runner.run_table` (every run with the appeal protocol on) and
reported by `papers.appeal.report`. Baselines are referred to by their registered names.
"""

from __future__ import annotations

from papers.spec import Arm, Setting, Table

BASELINES = (Arm("FedAvg", "fedavg"), Arm("FedProx", "fedprox"),
             Arm("SCAFFOLD", "scaffold"), Arm("PerFedAvg", "perfedavg"),
             Arm("pFedMe", "pfedme"), Arm("q-FFL", "qffl", {"qffl_q": 1.0}),
             Arm("MW-Fed", "mwfed"), Arm("MaxFL", "maxfl"))
# Solo models use the client lr of each run (solo_lr 0 = `--solo-lr same`, TMLR App. D.1:
# "the same batch-size and learning rate used for the local training").
BASE_HP = {"client_lr": 0.05, "server_lr": 1.0, "prox_mu": 0.01, "maxfl_eps": 1e-3,
           "solo_lr": 0.0}
# The FMNIST settings (TMLR App. D.1; IncFL Sec. 5). Clusters: 5 clusters x 2 labels, the
# labels of cluster c are (2c, 2c+1) (`--cluster-labels pairs`; the text does not say how
# labels are grouped; `random` is the other reading).
CLUSTERS_TMLR = dict(partition="clusters", num_clusters=5, labels_per_cluster=2,
                     cluster_labels="pairs", cohort=5, label_flip_fraction=0.3,
                     opt_out_after=0)
CLUSTERS_INCFL = dict(partition="clusters", num_clusters=5, labels_per_cluster=2,
                      cluster_labels="pairs", cohort=10, label_flip_fraction=0.0,
                      opt_out_after=0)
FLEXIBLE = dict(partition="dirichlet", alpha=0.5, cohort=5, label_flip_fraction=0.3,
                opt_out_after=10)
SETTINGS = {
    "tmlr": ("Table 2 as in TMLR: FMNIST 5 x 2-label clusters, cohort 5, 30% flipped",
             CLUSTERS_TMLR),
    "incfl": ("Table 2 as in IncFL (its Table 1): FMNIST 5 x 2-label clusters, cohort 10, "
              "no flipping", CLUSTERS_INCFL),
    "flexible": ("Table 1: FMNIST Dirichlet(0.5), 30% flipped, cohort 5, opt-out from "
                 "round 10", FLEXIBLE),
}
# Settings and algorithms `appeal-tune` searches (CPU budget: the Table 2 algorithms on the
# TMLR setting; `TUNED` carries their values over to the other settings, see COMMON_NOTES).
TUNE_ALGORITHMS = {"tmlr": ("fedavg", "fedprox", "scaffold", "mwfed", "maxfl")}
# (client_lr, local_steps) per setting and algorithm, chosen by
# `fedjax-appeal reproduce appeal-tune` (results/appeal-tune/table.md): the grid point with
# the highest final test accuracy (seen) on the held-out seed, ties by GM-Appeal.
TUNED: dict[str, dict[str, tuple[float, int]]] = {
    "tmlr": {"fedavg": (0.01, 10), "fedprox": (0.01, 10), "scaffold": (0.01, 10),
             "mwfed": (0.05, 10), "maxfl": (0.1, 10)}}


# The client lr grid of that search (`papers.appeal.tune.GRID`): `--robustness` reruns a
# table with each of these lrs shared by all arms.
LR_GRID = (0.1, 0.05, 0.01, 0.005)
# Settings without their own search use the values chosen on another one.
TUNED_FROM = {"incfl": "tmlr", "flexible": "tmlr"}


FMNIST_FULL = dict(dataset="fmnist", clients=100, unseen_clients=100, rounds=200,
                   eval_every=10, local_steps=10, batch_size=64, rho_steps=100)
FMNIST_QUICK = dict(dataset="fmnist", clients=20, unseen_clients=20, rounds=30, eval_every=10,
                    local_steps=10, batch_size=64, rho_steps=50, max_samples=8000)
COMMON_NOTES = (
    "- Schedule (every FMNIST column unless stated): the paper's, 100 seen + 100 unseen "
    "clients, 200 rounds, tau = 10 local steps unless tuned otherwise, b = 64, solo models "
    "100 local SGD steps (tau_l) with the run's client lr (`--solo-lr same`, TMLR App. D.1), "
    "MLP [64, 30] with dropout, 60/40 train/test split per client.\n"
    "- Hyperparameters: the client lr of FedAvg, FedProx, SCAFFOLD, MW-Fed and MaxFL was "
    "chosen by `fedjax-appeal reproduce appeal-tune` (results/appeal-tune/) on the TMLR "
    "Table 2 setting: grid lr {0.1, 0.05, 0.01, 0.005} (vmapped), tau = 10, b = 64, on a "
    "held-out seed (100), highest final test accuracy of the seen clients (TMLR D.1), and "
    "carried over to the other settings (CPU budget: a 2-core machine shared with other "
    "jobs); the paper's grid is larger (lr also 0.001, b in {32, 64, 128}, tau in {10, 30, "
    "50}) and per setting. Other algorithms (PerFedAvg, q-FFL) use lr 0.05, tau 10 "
    "untuned. Server lr 1, no momentum, no lr decay.\n"
    "- Appeal (`--appeal-def test-vs-solo-test`): client k finds the global model appealing "
    "iff its loss on k's held-out test split is below the solo model's; preferred acc is the "
    "test accuracy of whichever of the two k prefers. MaxFL's own objective uses rho_k = "
    "the solo model's train loss (Algorithm 1).\n"
    "- Paired differences: MaxFL minus the best other row (by mean), seed by seed (seeds "
    "fix the partition, the flipped clients and the training keys).\n"
    "- --quick runs a reduced setting (fewer clients/samples/rounds): its numbers are not "
    "comparable with the paper's.\n")


def tuned_values(setting: str, algorithm: str) -> tuple[dict, dict]:
    """(RunConfig keys, HParams keys) chosen for `algorithm` in `setting` (or in the setting
    it borrows from, `TUNED_FROM`); ({}, {}) when it was not tuned (lr 0.05, tau 10)."""
    for s in (setting, TUNED_FROM.get(setting, "")):
        if algorithm in TUNED.get(s, {}):
            lr, steps = TUNED[s][algorithm]
            return {"local_steps": steps}, {"client_lr": lr}
    return {}, {}


def fmnist(label: str, setting: str, extra: dict | None = None,
           quick_extra: dict | None = None, quick: bool = True) -> Setting:
    """A FMNIST column of a setting of `SETTINGS`, with the values tuned on it for every
    algorithm (`quick`: run by --quick)."""
    base = SETTINGS[setting][1]
    algorithms = {a for chosen in TUNED.values() for a in chosen}
    return Setting(label, {**FMNIST_FULL, **base, **(extra or {})},
                   {**FMNIST_QUICK, **base, **(extra or {}), **(quick_extra or {})}
                   if quick else None,
                   per_algorithm={a: tuned_values(setting, a) for a in sorted(algorithms)
                                  if tuned_values(setting, a) != ({}, {})})


def arms(*labels: str) -> tuple[Arm, ...]:
    """The baselines of `BASELINES` with these labels, in `BASELINES` order."""
    return tuple(v for v in BASELINES if v.label in labels)


# ----------------------------------------------------------------------------- tables

BASE = dict(base_cfg={"appeal": "on"}, base_hp=BASE_HP)

TABLE1_PAPER = {("FMNIST", k): {"test_acc_seen": a, "gm_appeal_seen": g} for k, a, g in [
    ("FedAvg", 43.70, 0.04), ("FedProx", 44.59, 0.05), ("SCAFFOLD", 39.90, 0.00),
    ("PerFedAvg", 46.62, 0.05), ("pFedMe", 31.06, 0.00), ("q-FFL", 29.92, 0.00),
    ("MW-Fed", 44.41, 0.04), ("MaxFL", 70.86, 0.37)]}
APPEAL_FLEXIBLE = Table(
    "appeal-flexible", "MaxFL Table 1: flexible participation (opt-out), 30% flipped",
    "Appeal under flexible participation (MaxFL Table 1)",
    settings=(fmnist("FMNIST", "flexible"),),
    arms=arms("FedAvg", "SCAFFOLD", "MW-Fed", "MaxFL"),
    metrics=("test_acc_seen", "gm_appeal_seen", "preferred_acc_seen", "test_acc_unseen",
             "gm_appeal_unseen"),
    paper=TABLE1_PAPER,
    notes=COMMON_NOTES + (
        "- Participation: rounds < 10 everyone; from round 10 on, the pool is the seen "
        "clients the current global model appeals to under the same definition as GM-Appeal "
        "(recomputed every round, so clients also come back); `pool.png` and "
        "`grid.*.runs[].available` give the pool size per round.\n"
        "- With the default definition no client finds the round-10 model of FedAvg, SCAFFOLD "
        "or MW-Fed appealing: their pool is empty from round 10 on and they keep their "
        "round-10 model (the protocol as the paper states it: clients opt out when the "
        "model does not appeal to them). MaxFL's round-10 model appeals to some clients, "
        "and its pool grows (`pool.png`).\n"
        "- Not run (CPU budget: a 2-core machine shared with other jobs): the paper's EMNIST "
        "column and the FedProx, PerFedAvg, pFedMe and q-FFL rows.\n"),
    report={"pool_plot": True},
    # FedAvg and MaxFL: the pair whose ranking the per-arm lrs may decide (CPU budget)
    robustness={"lrs": LR_GRID, "metrics": ("gm_appeal_seen", "test_acc_seen"),
                "arms": ("FedAvg", "MaxFL")},
    claim=("FMNIST", "gm_appeal_seen"), **BASE)

TABLE2_VARIANTS = ("FedAvg", "FedProx", "SCAFFOLD", "MW-Fed", "MaxFL")
TMLR_LABEL = "TMLR (cohort 5, 30% flipped)"
INCFL_LABEL = "IncFL (cohort 10, no flipping)"
# MaxFL Table 2 (unseen clients), the same numbers as IncFL Table 1 (no SCAFFOLD row there).
TABLE2_PAPER = {(col, k): {"gm_appeal_unseen": g, "preferred_acc_unseen": a}
                for col in (TMLR_LABEL, INCFL_LABEL)
                for k, g, a in [("FedAvg", 0.08, 98.53), ("FedProx", 0.07, 98.43),
                                ("SCAFFOLD", 0.02, 98.26), ("MW-Fed", 0.05, 98.32),
                                ("MaxFL", 0.55, 98.83)]
                if not (col == INCFL_LABEL and k == "SCAFFOLD")}
APPEAL_UNSEEN = Table(
    "appeal-unseen", "MaxFL Table 2: GM-Appeal on unseen clients (FMNIST 5x2 clusters), "
    "in the TMLR and the IncFL setting",
    "GM-Appeal on unseen clients (MaxFL Table 2 / IncFL Table 1)",
    settings=(fmnist(TMLR_LABEL, "tmlr"), fmnist(INCFL_LABEL, "incfl", quick=False)),
    arms=arms(*TABLE2_VARIANTS),
    metrics=("gm_appeal_unseen", "preferred_acc_unseen", "test_acc_unseen", "gm_appeal_seen",
             "preferred_acc_seen"),
    paper=TABLE2_PAPER,
    notes=COMMON_NOTES + (
        "- Two readings of the setting: TMLR Table 2 (App. D.1: cohort 5, label flipping on "
        "30% of the clients) and IncFL Table 1 (the same numbers; 10 clients per round, no "
        "flipping mentioned). Clusters: 5 x 2 labels, cluster c holds labels (2c, 2c+1) "
        "(`--cluster-labels pairs`).\n"
        "- Full participation (no opt-out); unseen clients never train, their solo models "
        "train on their own train split.\n"
        "- The per-cluster table shows where appeal comes from: a client can only find the "
        "10-class global model appealing when its loss on the client's two labels beats a "
        "2-label solo model's (solo accuracy ~97-99%).\n"
        "- The Sent140 column of the paper is not run (CPU budget).\n"),
    report={"plot_tag": "unseen", "summary": "table2"},
    # both readings, MaxFL against FedAvg and MW-Fed (CPU budget: the FedProx and SCAFFOLD
    # rows would almost double the runs)
    robustness={"lrs": LR_GRID, "metrics": ("gm_appeal_unseen",),
                "arms": ("FedAvg", "MW-Fed", "MaxFL")}, **BASE)

APPEAL_CURVES = Table(
    "appeal-curves", "MaxFL Figure 4: GM-Appeal and preferred accuracy (seen) over "
    "rounds, TMLR Table 2 setting",
    "GM-Appeal and preferred accuracy over rounds (MaxFL Figure 4)",
    settings=(fmnist(TMLR_LABEL, "tmlr"),),
    arms=arms(*TABLE2_VARIANTS),
    metrics=("gm_appeal_seen", "preferred_acc_seen", "test_acc_seen"),
    notes=COMMON_NOTES + ("- The runs are those of Table 2 (TMLR setting); the figure "
                            "shows the seen clients, mean ± std over seeds as bands.\n"),
    report={"plot_tag": "seen"}, **BASE)

APPEAL_FINETUNE = Table(
    "appeal-finetune", "MaxFL Table 3: GM-Appeal after 5 local fine-tuning steps",
    "GM-Appeal after personalization (MaxFL Table 3)",
    settings=(fmnist(TMLR_LABEL, "tmlr", {"finetune_steps": 5}),),
    arms=arms("FedAvg", "FedProx", "SCAFFOLD", "PerFedAvg", "MW-Fed", "MaxFL"),
    metrics=("gm_appeal_ft_seen", "gm_appeal_ft_unseen", "preferred_acc_ft_seen",
             "preferred_acc_ft_unseen", "gm_appeal_seen"),
    paper={(TMLR_LABEL, k): {"gm_appeal_ft_seen": a, "gm_appeal_ft_unseen": b}
           for k, a, b in [("FedAvg", 0.38, 0.39), ("FedProx", 0.40, 0.41),
                           ("SCAFFOLD", 0.02, 0.03), ("PerFedAvg", 0.45, 0.46),
                           ("MW-Fed", 0.28, 0.39), ("MaxFL", 0.55, 0.56)]},
    notes=COMMON_NOTES + ("- Same runs as Table 2 (TMLR setting) plus PerFedAvg; every "
                            "client fine-tunes the final global model for 5 local SGD steps "
                            "(client lr, b = 64) and compares it with its solo model.\n"), **BASE)

APPEAL_BYZANTINE = Table(
    "appeal-byzantine", "MaxFL Table 4: Byzantine clients (5% and 10%)",
    "Robustness to Byzantine clients (MaxFL Table 4)",
    settings=tuple(fmnist(f"Byzantine {int(f * 100)}%", "flexible", {"byzantine_fraction": f})
                   for f in (0.05, 0.1)),
    arms=arms("MW-Fed", "MaxFL"),
    metrics=("test_acc_seen", "gm_appeal_seen", "test_acc_unseen", "gm_appeal_unseen"),
    notes=COMMON_NOTES + (
        "- Rows: MW-Fed (the baseline the paper's text compares with) and MaxFL (FedAvg "
        "and FedProx left out: CPU budget).\n"
        "- Table 1's setting (Dirichlet(0.5), 30% flipped, opt-out from round 10; its tuned "
        "lrs) plus Byzantine seen clients that report their losses x byzantine_loss_scale "
        "(10) and add N(0, 1) noise to their updates. The paper's text gives only MaxFL's "
        "row (FMNIST: 69.75% / 0.39 seen, 71.11% / 0.46 unseen; its second pair of columns, "
        "53.82% / 0.26 and 55.10% / 0.28, is not labelled in the text) and the claim that "
        "MaxFL loses only 1-5% accuracy against Table 1.\n"),
    report={"pool_plot": True},
    robustness={"lrs": LR_GRID, "metrics": ("test_acc_seen", "gm_appeal_seen")}, **BASE)

RHO_STEPS = (50, 100, 150)
APPEAL_RHO_STEPS = Table(
    "appeal-rho-steps", "MaxFL Table 5: solo-model steps tau_l in {50, 100, 150}",
    "Sensitivity to the solo-model steps (MaxFL Table 5)",
    settings=tuple(fmnist(f"tau_l={s}", "tmlr", {"rho_steps": s}, {"rho_steps": s // 2})
                   for s in RHO_STEPS),
    arms=(Arm("FedAvg", "fedavg"), Arm("MaxFL", "maxfl")),
    metrics=("gm_appeal_seen", "preferred_acc_seen", "gm_appeal_unseen"),
    paper={(f"tau_l={s}", k): {"gm_appeal_seen": g} for s in RHO_STEPS
           for k, g in (("FedAvg", 0.01), ("MaxFL", 0.55))},
    notes=COMMON_NOTES + ("- TMLR Table 2 setting; only tau_l varies (tau_l = 100 is "
                            "Table 2's runs). FedProx (paper: as FedAvg) left out: CPU "
                            "budget. --quick halves tau_l.\n"),
    robustness={"lrs": LR_GRID, "metrics": ("gm_appeal_seen",)}, **BASE)

APPEAL_FAIRNESS = Table(
    "appeal-fairness", "MaxFL Table 7: q-FFL (q=1, q=10 as AFL stand-in) vs MaxFL",
    "Fairness baselines vs MaxFL (MaxFL Table 7)",
    settings=(fmnist(TMLR_LABEL, "tmlr"),),
    arms=(Arm("q-FFL q=1", "qffl", {"qffl_q": 1.0}),
          Arm("q-FFL q=10 (AFL stand-in)", "qffl", {"qffl_q": 10.0}),
          Arm("FedAvg", "fedavg"), Arm("MaxFL", "maxfl")),
    metrics=("gm_appeal_seen", "preferred_acc_seen", "test_acc_seen", "gm_appeal_unseen"),
    paper={(TMLR_LABEL, k): {"gm_appeal_seen": g, "preferred_acc_seen": a} for k, g, a in
           [("q-FFL q=1", 0.03, 99.24), ("q-FFL q=10 (AFL stand-in)", 0.0, 98.90),
            ("MaxFL", 0.55, 99.29)]},
    notes=COMMON_NOTES + ("- AFL is replaced by q-FFL with q = 10 (as the paper says it "
                            "emulates AFL); both q use q-FFL's tuned lr.\n"),
    # MaxFL against the fairness baselines the claim is about
    robustness={"lrs": LR_GRID, "metrics": ("gm_appeal_seen",),
                "arms": ("q-FFL q=1", "q-FFL q=10 (AFL stand-in)", "MaxFL")}, **BASE)

SYNTHETIC = dict(dataset="synthetic", synthetic_alpha=1.0, synthetic_beta=1.0,
                 partition="natural", clients=100, unseen_clients=0, cohort=10, rounds=200,
                 eval_every=10, local_steps=10, batch_size=64, rho_steps=100, min_samples=10,
                 opt_out_after=0, finetune_steps=0)
SYNTHETIC_QUICK = {**SYNTHETIC, "rounds": 50}
INCFL_SYNTHETIC = Table(
    "incfl-synthetic", "IncFL Figure 2: IPR and preferred accuracy over rounds on "
    "Synthetic(1,1), training-data ratio 40% vs 80%",
    "IPR and preferred accuracy on Synthetic(1,1) (IncFL Figure 2)",
    settings=tuple(Setting(f"train ratio {int(100 * r)}%", {**SYNTHETIC, "train_fraction": r},
                           {**SYNTHETIC_QUICK, "train_fraction": r}) for r in (0.4, 0.8)),
    arms=(Arm("FedAvg", "fedavg"), Arm("FedProx", "fedprox"), Arm("PerFedAvg", "perfedavg"),
          Arm("MW-Fed", "mwfed"), Arm("IncFL", "incfl")),
    metrics=("gm_appeal_seen", "preferred_acc_seen", "test_acc_seen"),
    notes=(
        "- IncFL Sec. 5 / App. F.1: Synthetic(1, 1) (FedProx's generator, power-law client "
        "sizes), 100 clients, logistic regression (60 -> 10), 10 clients per round, solo "
        "models 100 local SGD steps with the client lr and batch size; the client's data is "
        "split into train / test with ratio 40% or 80% (Fig. 2 (a), (b)). Schedule here: 200 "
        "rounds, tau = 10, b = 64, client lr 0.05 for every algorithm (not tuned: CPU "
        "budget; the paper tunes each). IPR = GM-Appeal of the seen (training) clients with "
        "`--appeal-def test-vs-solo-test` (IncFL eq. (1)).\n"
        "- The paper gives this as a figure (no numbers): IncFL's IPR is at least 5 points "
        "above the baselines and its preferred accuracy the highest, with a larger IPR gain "
        "at the 40% ratio than at 80%.\n"),
    # "INCFL incentivizes at least 5% more clients compared to the other baselines"
    # (IncFL Sec. 5, on Fig. 2): the main claim's size, IPR as a fraction
    report={"plot_tag": "seen", "target": "IncFL", "paper_text_effect": 0.05}, **BASE)

TABLES = (APPEAL_FLEXIBLE, APPEAL_UNSEEN, APPEAL_CURVES, APPEAL_FINETUNE, APPEAL_BYZANTINE,
          APPEAL_RHO_STEPS, APPEAL_FAIRNESS, INCFL_SYNTHETIC)
