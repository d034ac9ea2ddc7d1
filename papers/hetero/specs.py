"""The FedNova and FedBuff tables as data: settings (RunConfig keys), schedules (full and
--quick), arms and hyperparameters."""

from __future__ import annotations

from papers.shared_lr import Claim, SharedLr

# FedNova vs FedAvg: tau_k = one local epoch of each client's data, clipped to [1, 60].
NOVA_SETTING = dict(dataset="fmnist", partition="dirichlet", clients=50, unseen_clients=0,
                    cohort=10, local_steps=60, local_steps_min=1, local_steps_dist="epochs",
                    local_epochs=1.0, batch_size=32, appeal="off")
NOVA_SCHEDULE = {False: dict(rounds=100, eval_every=10), True: dict(rounds=20, eval_every=10)}
NOVA_ALPHAS = (0.3, 0.1)  # Dirichlet concentrations: the default setting, then a harsher one
NOVA_ARMS = ("fedavg", "fednova")
NOVA_HP = {"client_lr": 0.05}

# FedBuff vs synchronous FedAvg, per-step times LogNormal(0, step_time_sigma).
BUFF_SETTING = dict(dataset="fmnist", partition="dirichlet", alpha=0.3, clients=100,
                    unseen_clients=0, cohort=10, local_steps=20, batch_size=32, appeal="off")
BUFF_SCHEDULE = {False: dict(sync_rounds=40, sync_eval=4, buff_eval=20),
                 True: dict(sync_rounds=8, sync_eval=4, buff_eval=10)}
BUFF_HP = {"client_lr": 0.05, "step_time_sigma": 1.0}

# `--robustness`: both tables at client lr 0.01, 0.05 (theirs) and 0.1, the claims that held
NOVA_SHARED_LR = SharedLr(
    0.05, (0.01, 0.05, 0.1),
    (Claim("by_alpha/0.1/paired/train_loss", "-",
           "FedNova − FedAvg, global objective, Dirichlet 0.1"),
     Claim("by_alpha/0.1/paired/test_acc", "+",
           "FedNova − FedAvg, client-mean test accuracy (pp), Dirichlet 0.1")),
    options={"alphas": "0.1"},
    note="Only the Dirichlet(0.1) block is rerun (the claims that held there; "
         "`--set alphas=0.1`). ")
BUFF_SHARED_LR = SharedLr(
    0.05, (0.01, 0.05, 0.1),
    (Claim("paired/time_to_target", "-",
           "FedBuff − FedAvg, simulated seconds to the target accuracy"),
     Claim("paired/1", "+", "FedBuff − FedAvg, accuracy at the full horizon (pp)")),
    note="The target accuracy is the table's rule at each lr (95% of the lowest final "
         "FedAvg accuracy over the seeds), so it moves with the lr. ")
