"""Planning a large run: what to set, and the goodput it will get (``nemo-resiliency plan``).

failures.py   the failure model (per-GPU rates by fault class; the Llama 3 profile)
recovery.py   what one fault costs for a mechanism set; goodput in closed form
optimum.py    Young/Daly save intervals, section timeouts, restart budgets, a warm reserve
simulate.py   Monte Carlo of the whole run (numpy, seeded, bounded)
mechanisms.py Megatron Bridge's defaults as they behave, the user's plugins, the recommended set
plan.py       all of it together, and the settings flagged as far from the optimum
report.py     the table and the plot
"""

from nemo_resiliency_plugins.tools.planning.failures import FAULT_CLASSES, FailureModel, llama3, parse_failure_rate
from nemo_resiliency_plugins.tools.planning.plan import PlanReport, plan
from nemo_resiliency_plugins.tools.planning.recovery import MechanismSet, RunParams

__all__ = [
    "FAULT_CLASSES",
    "FailureModel",
    "MechanismSet",
    "PlanReport",
    "RunParams",
    "llama3",
    "parse_failure_rate",
    "plan",
]
