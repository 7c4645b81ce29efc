"""Cases 1-4: the plugin settings each variant runs with, and the order the jobs run in."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nemo_resiliency_plugins.testing.inprocess_loop import SHORT_TIMEOUTS
from recovery_lib.jobs import Bench, Run
from recovery_lib.settings import (
    CASES,
    FT,
    HANG_CHECK_INTERVAL_S,
    HANG_COMPUTED,
    HANG_EXPLICIT,
    HANG_SECTION_TIMEOUTS,
    INPROCESS,
    LAUNCHER_RESTART,
    REPO,
    RESERVE,
    RESTARTS,
    TORCHRUN,
)


def ft_default() -> list[Any]:
    from nemo_resiliency_plugins import FaultTolerancePlugin

    return [FaultTolerancePlugin(num_in_job_restarts=RESTARTS)]


def ft_hang() -> list[Any]:
    from nemo_resiliency_plugins import FaultTolerancePlugin

    return [
        FaultTolerancePlugin(
            num_in_job_restarts=RESTARTS,
            section_timeouts=dict(HANG_SECTION_TIMEOUTS),
            workload_check_interval=HANG_CHECK_INTERVAL_S,
        )
    ]


def ft_raise() -> list[Any]:
    from nemo_resiliency_plugins import FaultTolerancePlugin

    # A step timeout well above the in-process restart's timeouts: the rank monitor must not act first.
    return [
        FaultTolerancePlugin(
            num_in_job_restarts=RESTARTS,
            section_timeouts={"setup": 120.0, "step": 30.0, "checkpointing": 60.0},
            out_of_section_timeout=60.0,
            workload_check_interval=1.0,
        )
    ]


def ipr_settings() -> dict[str, Any]:
    return dict(SHORT_TIMEOUTS)


def ipr_reserve() -> list[Any]:
    from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin

    return [InProcessRestartPlugin(**ipr_settings(), active_world_size=2)]


# 3 ranks = 2 active + 1 reserve; Megatron Bridge derives data_parallel_size from WORLD_SIZE=3 before NVRx assigns
# ranks, so the global batch must divide by 3 and 2 (the toy model's data does not depend on it).
RESERVE_RUN = {"ntasks": 3, "overrides": ("train.global_batch_size=12",)}


def ft_and_ipr() -> list[Any]:
    from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin

    return ft_raise() + [InProcessRestartPlugin(**ipr_settings())]


def inprocess_unavailable() -> str | None:
    if not (REPO / "nemo_resiliency_plugins" / "inprocess_restart.py").exists():
        return "nemo_resiliency_plugins/inprocess_restart.py does not exist"
    try:
        from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin

        InProcessRestartPlugin(**ipr_settings())
    except Exception as e:
        return f"InProcessRestartPlugin unusable: {type(e).__name__}: {e}"
    return None


def run_jobs(bench: Bench, repeat: int, notes: dict[str, Any], cases: Sequence[str] = CASES) -> None:
    """Every case once per repetition (so a cut-short run still has a figure in every row); the two variants
    of a case alternate their order from one repetition to the next. ``cases`` narrows the run (development:
    the rows of the cases left out say n/a)."""
    notes["ipr_reason"] = inprocess_unavailable()
    per_rep = 2 * len(cases) - (1 if "raise" in cases and notes["ipr_reason"] is not None else 0)
    per_rep += 2 if "kill" in cases and notes["ipr_reason"] is None else 0
    bench.total = per_rep * repeat
    torchrun_env = {"PET_MAX_RESTARTS": str(RESTARTS)}
    seed: list[Run] = []

    def copy_state(save: Path) -> None:
        # The "computed" hang runs load the timeouts a fault-free ft_launcher run saved (Megatron Bridge's
        # calc_ft_timeouts), as the next run of a job in the same checkpoint directory would.
        if not seed:
            found = [r for r in bench.of("fault-free", FT) if r.ok and (r.save_dir / "ft_state.json").exists()]
            if not found:
                return
            seed.append(found[0])
            notes["ft_state"] = json.loads((found[0].save_dir / "ft_state.json").read_text())
        shutil.copy(seed[0].save_dir / "ft_state.json", save / "ft_state.json")

    def alternate(pair: list, rep: int) -> list:
        return pair[::-1] if rep % 2 else pair

    for rep in range(repeat):
        for variant, launcher, env, plugins in alternate(
            [(TORCHRUN, "torchrun", torchrun_env, list), (FT, None, None, ft_default)], rep
        ):
            if "fault-free" in cases:
                bench.job("fault-free", variant, rep, plugins, launcher=launcher, executor_env=env)
        for variant, launcher, env, plugins in alternate(
            [(TORCHRUN, "torchrun", torchrun_env, list), (FT, None, None, ft_default)], rep
        ):
            if "kill" in cases:
                bench.job("kill", variant, rep, plugins, fault="kill", launcher=launcher, executor_env=env)
        for fault in alternate([None, "kill"], rep) if "kill" in cases and notes["ipr_reason"] is None else ():
            bench.job("kill" if fault else "fault-free", RESERVE, rep, ipr_reserve, fault=fault, **RESERVE_RUN)
        for variant, prepare in alternate([(HANG_EXPLICIT, None), (HANG_COMPUTED, copy_state)], rep):
            if "hang" in cases:
                bench.job("hang", variant, rep, ft_hang, fault="hang", prepare=prepare)
        for variant in alternate([LAUNCHER_RESTART, INPROCESS], rep) if "raise" in cases else ():
            if variant == LAUNCHER_RESTART:
                bench.job("raise", LAUNCHER_RESTART, rep, ft_raise, fault="raise")
            elif notes["ipr_reason"] is None:
                run = bench.job("raise", INPROCESS, rep, ft_and_ipr, fault="raise")
                if not run.ok:
                    notes["ipr_reason"] = f"the in-process run ended {run.state} (--keep keeps its log)"
                elif not run.inprocess_entries():
                    notes["ipr_reason"] = "the job recovered, but not in-process (no INPROCESS iteration=1 line)"
                if notes["ipr_reason"]:
                    bench.total -= repeat - rep - 1
