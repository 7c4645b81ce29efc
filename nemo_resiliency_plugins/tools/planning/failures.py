"""The failure model: how often each kind of fault hits one GPU, scaled to a run of N GPUs.

Faults are split by what recovery they need, not by which part broke, because that is what decides the cost:

* ``dead_process``: a rank exits (software bug, a transient GPU/host error); the launcher sees it at once and a
  restart on the same nodes works.
* ``hang``: a rank stops making progress without exiting (a stuck collective, a flaky link); only a timeout
  finds it.
* ``node_loss``: a node's hardware is broken (faulty GPU, HBM); restarting on the same nodes fails again, a
  spare node or a new allocation is needed.
* ``preemption``: planned (maintenance, firmware, a scheduler's time limit); a signal comes first, so a job
  that handles it saves and loses nothing but the restart.
* ``silent_corruption``: wrong numbers, no crash; only a check on the loss (Megatron Core's re-run state
  machine) or a person notices.

Rates are per GPU-hour and scale linearly with the number of GPUs: at these scales a failure of any one GPU
interrupts the whole synchronous job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from nemo_resiliency_plugins.errors import ResiliencyConfigError

FAULT_CLASSES = ("dead_process", "hang", "node_loss", "preemption", "silent_corruption")

LLAMA3_SOURCE = (
    "Llama Team, AI @ Meta, 'The Llama 3 Herd of Models' (arXiv:2407.21783, 2024), section 3.3.4: 16,384 H100 "
    "GPUs, a 54-day snapshot of pre-training, 466 job interruptions (47 planned, 419 unexpected); of the "
    "unexpected: faulty GPUs 30.1 %, GPU HBM3 memory 17.2 %, network switches and cables 8.4 %; more than 90 % "
    "effective training time"
)

# The published figures, kept as numbers so the derivation below can be read and tested.
LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54
LLAMA3_PLANNED = 47
LLAMA3_UNEXPECTED = 419
LLAMA3_FAULTY_GPU = 0.301
LLAMA3_HBM3 = 0.172
LLAMA3_NETWORK = 0.084
# Not in the figures this tool cites: the share of silent data corruption. The report's table lists a small
# share for it; 1.4 % is our reading of it, an assumption stated in the output.
LLAMA3_SILENT_CORRUPTION_ASSUMED = 0.014


@dataclass(frozen=True, kw_only=True)
class FailureModel:
    """Faults per GPU-hour by fault class, with where the numbers come from."""

    name: str
    per_gpu_hour: Mapping[str, float]
    source: str
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for key, rate in self.per_gpu_hour.items():
            if key not in FAULT_CLASSES:
                raise ResiliencyConfigError("failure model", "fault class", key, "one of " + ", ".join(FAULT_CLASSES))
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate < 0:
                raise ResiliencyConfigError("failure model", key, rate, "a finite rate >= 0 (faults per GPU-hour)")
        # Every class present, zero where not given, so callers never guess.
        object.__setattr__(self, "per_gpu_hour", {c: float(self.per_gpu_hour.get(c, 0.0)) for c in FAULT_CLASSES})

    def cluster_rates(self, gpus: int) -> dict[str, float]:
        """Faults per second of wall time for the whole job, by class."""
        return {c: rate * gpus / 3600.0 for c, rate in self.per_gpu_hour.items()}

    def total_per_gpu_hour(self) -> float:
        return sum(self.per_gpu_hour.values())

    def shares(self) -> dict[str, float]:
        total = self.total_per_gpu_hour()
        return {c: (r / total if total else 0.0) for c, r in self.per_gpu_hour.items()}


def llama3() -> FailureModel:
    """The profile derived from the Llama 3 report's figures (see ``LLAMA3_SOURCE``).

    Derivation, per fault class (GPU-hours = 16,384 x 54 x 24 = 21,233,664):

    * ``preemption``: the 47 planned interruptions (maintenance, firmware, configuration changes): they come
      with notice.
    * ``node_loss``: faulty GPUs (30.1 %) + HBM3 memory (17.2 %) of the 419 unexpected: broken hardware that a
      restart on the same node does not fix.
    * ``hang``: network switches and cables (8.4 %): a broken link stalls collectives until a timeout.
    * ``silent_corruption``: 1.4 % of the unexpected (assumed, see ``LLAMA3_SILENT_CORRUPTION_ASSUMED``).
    * ``dead_process``: the rest of the unexpected (43.0 %: software bugs, other host and GPU components):
      modelled as a rank that exits and a restart in place that works. The figures cited do not break this
      share down; treating all of it as restartable in place is the main assumption of this profile.
    """
    gpu_hours = LLAMA3_GPUS * LLAMA3_DAYS * 24
    node = LLAMA3_FAULTY_GPU + LLAMA3_HBM3
    hang = LLAMA3_NETWORK
    sdc = LLAMA3_SILENT_CORRUPTION_ASSUMED
    dead = 1.0 - node - hang - sdc
    per = LLAMA3_UNEXPECTED / gpu_hours
    return FailureModel(
        name="llama3",
        per_gpu_hour={
            "dead_process": dead * per,
            "hang": hang * per,
            "node_loss": node * per,
            "preemption": LLAMA3_PLANNED / gpu_hours,
            "silent_corruption": sdc * per,
        },
        source=LLAMA3_SOURCE,
        assumptions=(
            "node loss = faulty GPUs + HBM3 (47.3 % of unexpected); hang = network (8.4 %); silent corruption "
            "1.4 % (assumed); dead process = the remaining 43.0 %, restartable in place (assumed)",
            "planned interruptions (47) are preemptions with notice",
            "rates scale linearly with the number of GPUs",
        ),
    )


PROFILES = {"llama3": llama3}

_RATE_ITEM = re.compile(r"([a-z_]+)=([0-9.eE+-]+)")


def parse_failure_rate(text: str) -> FailureModel:
    """``--failure-rate``: one number (faults per GPU-hour, split like the Llama 3 profile) or
    ``class=rate,class=rate`` (faults per GPU-hour per class; classes not named are 0)."""
    text = text.strip()
    allowed = (
        "a number of faults per GPU-hour (e.g. 2e-5) or class=rate pairs such as 'hang=1e-6,dead_process=5e-6' "
        f"(classes: {', '.join(FAULT_CLASSES)})"
    )
    try:
        total = float(text)
    except ValueError:
        total = None
    if total is not None:
        if not math.isfinite(total) or total <= 0:
            raise ResiliencyConfigError("plan", "--failure-rate", text, allowed)
        shares = llama3().shares()
        return FailureModel(
            name=f"{total:g}/GPU-hour",
            per_gpu_hour={c: total * s for c, s in shares.items()},
            source=f"--failure-rate {total:g} faults per GPU-hour, split by class like the Llama 3 profile",
            assumptions=("class shares as in the Llama 3 profile",),
        )
    rates: dict[str, float] = {}
    for item in text.split(","):
        match = _RATE_ITEM.fullmatch(item.strip())
        if match is None:
            raise ResiliencyConfigError("plan", "--failure-rate", text, allowed)
        name, value = match.groups()
        try:
            rate = float(value)
        except ValueError:
            raise ResiliencyConfigError("plan", "--failure-rate", text, allowed) from None
        if name in rates:
            raise ResiliencyConfigError("plan", "--failure-rate", text, allowed, detail=f"{name} given twice")
        rates[name] = rate
    model = FailureModel(name="custom", per_gpu_hour=rates, source=f"--failure-rate {text}")
    if model.total_per_gpu_hour() <= 0:
        raise ResiliencyConfigError("plan", "--failure-rate", text, allowed, detail="every rate is 0")
    return model
