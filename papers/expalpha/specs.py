"""The Exp-alpha tables as data: backbones, aggregations, compute profiles and their
settings (RunConfig keys), accuracy targets, learning rates and the paper's numbers."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Backbone:
    """A federated optimiser under which proportional and Exp-alpha weights are compared."""

    label: str
    algorithm: str
    server_opt: str = "sgd"
    hp: dict = dataclasses.field(default_factory=dict)
    bn: bool = False  # needs a BatchNorm model (FedBN keeps BN layers per client)


ALPHA = 0.2  # Exp-alpha temperature of Tables 1-3 and Fig. 2
BACKBONES = (
    Backbone("FedAvg", "fedavg"),
    Backbone("FedProx", "fedprox", hp={"prox_mu": 0.01}),
    Backbone("FedFor", "fedfor", hp={"fedfor_lambda": 0.1}),
    Backbone("FedAvgM", "fedavg", "momentum", {"server_lr": 1.0, "server_momentum": 0.9}),
    Backbone("FedAdam", "fedavg", "adam", {"server_lr": 0.01, "server_momentum": 0.9,
                                           "server_beta2": 0.99, "server_eps": 1e-3}),
)
FEDBN = Backbone("FedBN", "fedbn", bn=True)  # Table 3 only (domain shift)
# Table 3: the paper reports FedAvg and FedBN; FedFor joins them (FedProx, FedAvgM and
# FedAdam are left out of the CPU budget: Digits runs train a BatchNorm CNN).
DOMAIN_BACKBONES = ("FedAvg", "FedFor", "FedBN")
BY_LABEL = {b.label: b for b in (*BACKBONES, FEDBN)}
AGGREGATIONS = ("proportional", "exp-alpha")
AGG_LABEL = {"proportional": "proportional", "exp-alpha": f"Exp-α (α={ALPHA:g})"}
ALPHAS = (0.2, 1.0, 5.0, 25.0, 125.0)

# --quick: a pipeline check with one seed; each table runs a subset of the backbones so
# that the quick runs together exercise all six.
QUICK_BACKBONES = {"imbalance": ("FedAvg", "FedFor"), "flip": ("FedProx", "FedAdam"),
                   "domain": ("FedAvgM", "FedBN")}

# The paper's numbers (CIFAR-10, ResNet20, E = 20, t = 400): acc40 (rounds) and final test
# accuracy (%), per backbone and aggregation (Tables 1 and 2).
_P1 = {"FedAvg": (43.33, 38.00, 64.60, 66.86), "FedProx": (47.33, 36.00, 64.57, 65.54),
       "FedFor": (37.67, 34.67, 69.62, 70.04), "FedAvgM": (26.67, 25.00, 70.72, 72.21),
       "FedAdam": (22.33, 18.67, 78.87, 79.69)}
_P2 = {"FedAvg": (69.33, 36.33, 59.47, 67.01), "FedProx": (59.67, 34.33, 60.27, 66.51),
       "FedFor": (53.00, 28.00, 61.98, 70.39), "FedAvgM": (39.33, 22.67, 64.13, 73.45),
       "FedAdam": (30.00, 20.00, 71.51, 79.51)}
PAPER = {s: {(b, a): {"acc40": v[i], "acc_final": v[2 + i]} for b, v in t.items()
             for i, a in enumerate(AGGREGATIONS)}
         for s, t in (("imbalance", _P1), ("flip", _P2))}
# FedAvg's average accuracy gain of Exp-α over proportional on Digits (Table 3: 81.89 ->
# 81.92%, pp).
PAPER_DOMAIN_FEDAVG_GAIN = 0.03
# The paper's final-accuracy gain of Exp-α over proportional, FedAvg, Table 1 (pp).
PAPER_IMBALANCE_FEDAVG_GAIN = round(_P1["FedAvg"][3] - _P1["FedAvg"][2], 2)
# The paper's FedAvg Table 1 at other (E, t): (acc40 prop, Exp-α, test prop, Exp-α).
PAPER_GRID = {20: (43.33, 38.00, 64.60, 66.86), 40: (22.33, 19.67, 64.25, 65.59),
              160: (7.00, 5.33, 63.55, 66.09)}

# Accuracy targets (fractions) per profile; the metric every setting reads.
TARGETS = {"cpu": (0.70, 0.75, 0.80), "gpu": (0.40, 0.60)}
DOMAIN_TARGETS = (0.60, 0.70, 0.80)
METRIC = {"imbalance": "test_acc_global", "imbalance-random": "test_acc_global",
          "flip": "test_acc_global", "adapt-imbalance": "test_acc_global",
          "adapt-flip": "test_acc_global", "alpha": "test_acc_global",
          "alpha-random": "test_acc_global",
          "domain": "test_acc_seen"}
CLIENT_LR = {"cpu": 0.05, "gpu": 0.01}

# (E, t) grid: the paper's (20, 400), (40, 200), (80, 100), (160, 50) keep E·t = 8000;
# the cpu profile keeps E·t = 2000.
GRID = {"cpu": ((10, 200), (20, 100), (40, 50), (80, 25)),
        "gpu": ((20, 400), (40, 200), (80, 100), (160, 50))}

# Settings (RunConfig keys) per profile; "quick" overrides the cpu profile for --quick.
# cpu: FMNIST MLP, ~10 s per 100-round run on a shared 2-core CPU.
_FM = dict(dataset="fmnist", imbalance_size=200, imbalance_test_per_class=5,
           global_test_per_class=500, clients=200, local_steps=20, batch_size=32,
           rounds=100, eval_every=2)
_IMB = dict(_FM, imbalance_ratios="random", imbalance_major="shared", cohort=10)
_FLIP = dict(_FM, imbalance_ratios="1.0", cohort=6, label_flip_fraction=1 / 3,
             flip_ratio=1.0, flip_protocol="bernoulli")
_ALPHA = dict(_FM, imbalance_ratios="1.0x4,0.001x6", selector="stratified", cohort=10,
              local_steps=13)  # 2 epochs of 200 rows at batch 32
_DOM = dict(dataset="digits", domains="mnist,usps,mnistm", domain_samples=400, clients=6,
            cohort=6, local_steps=10, batch_size=16, rounds=16, eval_every=2)
_GPU = dict(dataset="cifar10", imbalance_size=500, imbalance_test_per_class=5,
            global_test_per_class=1000, clients=70, max_samples=0, local_steps=20,
            batch_size=128, rounds=400, eval_every=1)
SCHEDULES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {"imbalance": _IMB, "imbalance-random": dict(_IMB, imbalance_major="random"),
            "flip": _FLIP,
            "adapt-imbalance": dict(_IMB, imbalance_ratios="1.0x4,0.01x3,0.1x3",
                                    selector="stratified"),
            "adapt-flip": dict(_FLIP, flip_protocol="fixed"),
            "domain": _DOM, "alpha": _ALPHA,
            "alpha-random": dict(_ALPHA, imbalance_major="random")},
    "quick": {k: dict(rounds=4, eval_every=2) for k in
              ("imbalance", "imbalance-random", "flip", "adapt-imbalance", "adapt-flip",
               "domain", "alpha", "alpha-random")},
    "gpu": {"imbalance": dict(_GPU, imbalance_ratios="random", imbalance_major="shared",
                              cohort=10),
            "imbalance-random": dict(_GPU, imbalance_ratios="random",
                                     imbalance_major="random", cohort=10),
            "flip": dict(_GPU, imbalance_ratios="1.0", cohort=6, label_flip_fraction=1 / 3,
                         flip_ratio=1.0, flip_protocol="bernoulli"),
            "adapt-imbalance": dict(_GPU, imbalance_ratios="1.0x4,0.01x3,0.1x3",
                                    selector="stratified", cohort=10),
            "adapt-flip": dict(_GPU, imbalance_ratios="1.0", cohort=6,
                               label_flip_fraction=1 / 3, flip_ratio=1.0,
                               flip_protocol="fixed"),
            "domain": dict(_DOM, domain_samples=2000, clients=12, local_steps=50,
                           batch_size=32, rounds=100, eval_every=1),
            "alpha": dict(_GPU, imbalance_ratios="1.0x4,0.001x6", selector="stratified",
                          cohort=10, local_steps=8, rounds=200),
            "alpha-random": dict(_GPU, imbalance_ratios="1.0x4,0.001x6",
                                 selector="stratified", cohort=10, local_steps=8, rounds=200,
                                 imbalance_major="random")},
}
MODELS = {"cpu": ("mlp", "cnn_bn"), "gpu": ("resnet20", "resnet20")}
HISTORY_KEYS = ("round", "train_loss", "test_acc_seen", "test_acc_global", "test_acc_clean",
                "test_acc_flipped", "test_acc_balanced", "test_acc_imbalanced")
DOMAIN_NAMES = {"mnist": "MNIST", "usps": "USPS", "mnistm": "MNIST-M"}


OPTIONS = {"profile": "cpu (default: Fashion-MNIST, MLP) or gpu (CIFAR-10, ResNet20)",
           "model": "a registered model for the non-Digits settings (default: the profile's)"}
RATIO_NAMES = {f"{r:g}": f"ratio {r:g}" for r in (1.0, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001)}
ADAPT_GROUPS = {"adapt-imbalance": ("group", {"0": "balanced (ratio 1)",
                                              "1": "imbalanced (ratio 0.01)",
                                              "2": "imbalanced (ratio 0.1)"}),
                "adapt-flip": ("flipped", {"False": "clean", "True": "flipped"})}
