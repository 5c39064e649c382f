"""The real-model suite (``optimus-egg bench --suite real``): published recommendation, CTR,
multi-task, sequence, DLRM, transformer and channel-splitting vision models, each written in plain torch from its paper's
or its reference library's public definition (DeepCTR-Torch, pytorch-fm, FuxiCTR, the DLRM
reference, TorchRec, nanoGPT, timm, Hugging Face, torchvision, Ultralytics), plumbing included: per-field lookup lists,
``itertools.combinations`` loops, per-head, per-expert and per-pair Linears, split, chunk,
unbind, stack and cat. Random init at toy sizes, so the suite runs in minutes on 2 CPU cores.

Every entry is a :data:`~optimus_egg.bench.models.Factory` (seeded: every backend sees the same
weights and inputs); models that embed take integer ids.
"""

from __future__ import annotations

from optimus_egg.bench import real_ctr, real_cross, real_dlrm, real_multitask, real_sequence, real_transformer, \
    real_vision
from optimus_egg.bench.models import Factory

MODULES = (real_ctr, real_cross, real_multitask, real_sequence, real_dlrm, real_transformer, real_vision)

#: ``--quick``: one or two models per module, the plumbing the optimizer has most to do with.
QUICK = ("real_onn", "real_fibinet", "real_autoint", "real_dcn_mix", "real_mmoe", "real_din",
         "real_torchrec_dlrm", "real_t5_encoder")


def models(quick: bool = False) -> dict[str, Factory]:
    """Every real model by name, in table order (``quick``: the :data:`QUICK` subset)."""
    everything = {name: make for module in MODULES for name, make in module.models().items()}
    return {name: everything[name] for name in QUICK} if quick else everything
