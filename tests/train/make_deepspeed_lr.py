#!/usr/bin/env python3
"""DeepSpeed's learning-rate schedules as its engine applies them, for tierflow's LearningRate.

Runs DeepSpeed's own WarmupLR, WarmupDecayLR and WarmupCosineLR (deepspeed.runtime.lr_schedules)
over a one-parameter optimizer the way DeepSpeedEngine does: each update uses the rate the
scheduler last set, then the engine calls scheduler.step(). Writes, for each case, the rate of
updates 1..N to tests/train/data/deepspeed_lr.json (checked by train_adamw_test's
LearningRate.DeepSpeedsSchedulesAsItsEngineStepsThem).

    python3 -m venv .cache/ds-venv && .cache/ds-venv/bin/pip install torch deepspeed
    .cache/ds-venv/bin/python tests/train/make_deepspeed_lr.py
"""
import json
import pathlib

import torch
from deepspeed.runtime import lr_schedules

LR = 0.0009765625  # 2^-10: the optimizer's rate, exact in fp32 and fp64
UPDATES = 40
CASES = [
    ("WarmupLR", dict(warmup_min_lr=0.0, warmup_max_lr=LR, warmup_num_steps=8, warmup_type="log")),
    ("WarmupLR", dict(warmup_min_lr=LR / 8, warmup_max_lr=LR, warmup_num_steps=5, warmup_type="linear")),
    ("WarmupDecayLR", dict(total_num_steps=30, warmup_min_lr=0.0, warmup_max_lr=LR, warmup_num_steps=6, warmup_type="log")),
    ("WarmupDecayLR", dict(total_num_steps=25, warmup_min_lr=LR / 4, warmup_max_lr=LR, warmup_num_steps=1, warmup_type="linear")),
    ("WarmupCosineLR", dict(total_num_steps=30, warmup_min_ratio=0.0, warmup_num_steps=6, cos_min_ratio=0.0001, warmup_type="log")),
    ("WarmupCosineLR", dict(total_num_steps=20, warmup_min_ratio=0.25, warmup_num_steps=4, cos_min_ratio=0.1, warmup_type="linear")),
]


def rates(kind, params):
    p = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([p], lr=LR)
    scheduler = getattr(lr_schedules, kind)(optimizer, **params)
    out = []
    for _ in range(UPDATES):
        out.append(optimizer.param_groups[0]["lr"])  # what this update runs at
        optimizer.step()
        scheduler.step()
    return out


def main():
    cases = [{"type": kind, "params": params, "lr": LR, "rates": rates(kind, params)} for kind, params in CASES]
    path = pathlib.Path(__file__).parent / "data" / "deepspeed_lr.json"
    path.write_text(json.dumps({"deepspeed": __import__("deepspeed").__version__, "cases": cases}, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
