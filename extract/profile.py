"""Cost profiles: the per-category weights ``optimus-egg tune`` fits on a device, as JSON.

A profile scales every cost model's kernel costs by op category
(:data:`~optimus_egg.extract.cost.CATEGORIES`); ``optimize(..., cost_profile=PATH)`` and the
backend read it with :func:`load_profile`. The tuning search that writes one is
:mod:`optimus_egg.tune`.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from optimus_egg.extract.cost import CATEGORIES

VERSION = 1


@dataclass
class Profile:
    device: str
    weights: dict[str, float]  # category -> cost of one launch, in pointwise launches
    seconds: dict[str, list[float]] = field(default_factory=dict)  # category -> seconds per shape
    shapes: list[list[int]] = field(default_factory=list)
    torch: str = torch.__version__
    version: int = VERSION

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n")


def load_profile(path: str | Path) -> Profile:
    """Read a profile written by :meth:`Profile.save`; anything else is a clear error."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"cost profile {str(p)!r} does not exist (write one with `optimus-egg tune --out PATH`)")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"cost profile {str(p)!r} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError(f"cost profile {str(p)!r} is not a version-{VERSION} optimus_egg profile")
    weights = data.get("weights")
    if not isinstance(weights, dict) or not weights:
        raise ValueError(f"cost profile {str(p)!r} has no 'weights' object")
    unknown = sorted(set(weights) - set(CATEGORIES))
    if unknown:
        raise ValueError(f"cost profile {str(p)!r}: unknown categories {unknown}; valid: {', '.join(CATEGORIES)}")
    for name, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ValueError(f"cost profile {str(p)!r}: weight {name!r} must be a finite number >= 0, got {w!r}")
    return Profile(device=str(data.get("device", "?")), weights={k: float(v) for k, v in weights.items()},
                   seconds=data.get("seconds", {}), shapes=data.get("shapes", []),
                   torch=str(data.get("torch", "?")))


def weights_for(path: str | Path, device: str) -> dict[str, float]:
    """A profile's weights for a graph on ``device`` (``cpu``/``cuda``), with a warning when the
    profile was tuned on another: the weights price that device's kernels, silently misapplied."""
    profile = load_profile(path)
    if profile.device != device:
        warnings.warn(f"optimus_egg: cost profile {str(path)!r} was tuned on {profile.device}, this graph runs "
                      f"on {device}: its weights are used as they are (`optimus-egg tune` on this device fits "
                      "its own)", UserWarning, stacklevel=2)
    return profile.weights
