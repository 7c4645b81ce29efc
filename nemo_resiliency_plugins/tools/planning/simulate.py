"""Monte Carlo of a whole run: faults drawn at random, each recovered by the rules of ``recovery.py``.

Why simulate when there is a closed form: the closed form is first order in the fault rate (a fault during a
recovery, a pool of restarts running out, an async save still being written, Megatron Bridge's crash loop
are not in it). The simulation plays every attempt of the run out, so where both apply they must agree, and
where the closed form does not apply the simulation is the answer.

Vectorised: one numpy lane per (save interval, replica); each loop iteration ends one attempt of every lane
(a fault, an attempt ending by itself, or the end of the run). The number of iterations is bounded by a
Poisson tail bound on the number of attempts, so the run time is bounded whatever the inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nemo_resiliency_plugins.errors import ResiliencyConfigError
from nemo_resiliency_plugins.tools.planning.failures import FAULT_CLASSES, FailureModel
from nemo_resiliency_plugins.tools.planning.recovery import (
    MechanismSet,
    RunParams,
    fault_costs,
    reserve_factor,
    training_rate,
)

MAX_LANES = 200_000  # memory and time bound: lanes x iterations stays in the tens of millions of operations
# Time bound: a lane plays at most this many expected faults (renewal cycles: an attempt and the detection of
# the fault that ends it). A longer run (or a higher rate) is simulated over its first part only: goodput is a
# rate, and 1,000 faults estimate it as well as more would.
MAX_EXPECTED_FAULTS = 1000.0
_REDO = {"persistent": 0, "local": 1, "none": 2}


@dataclass(frozen=True)
class SimulationResult:
    """Goodput per lane, shape (intervals, replicas)."""

    intervals_s: np.ndarray
    goodput: np.ndarray
    attempts: int  # loop iterations run (the longest lane's number of attempts)
    horizon_s: float = 0.0  # wall time simulated: the run, or its first MAX_EXPECTED_FAULTS faults' worth

    def mean(self) -> np.ndarray:
        return self.goodput.mean(axis=1)

    def stderr(self) -> np.ndarray:
        n = self.goodput.shape[1]
        return self.goodput.std(axis=1, ddof=1) / math.sqrt(n) if n > 1 else np.zeros(len(self.intervals_s))


def simulate(
    params: RunParams,
    mech: MechanismSet,
    failures: FailureModel,
    intervals_s: np.ndarray | list[float],
    *,
    local_s: float | None = None,
    replicas: int = 200,
    seed: int = 0,
) -> SimulationResult:
    """Goodput of ``replicas`` runs for each persistent save interval in ``intervals_s``."""
    intervals = np.asarray(intervals_s, dtype=float)
    if intervals.ndim != 1 or intervals.size == 0 or not np.all(np.isfinite(intervals)) or np.any(intervals <= 0):
        raise ResiliencyConfigError("plan", "save intervals", intervals_s, "finite numbers > 0")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ResiliencyConfigError("plan", "replicas", replicas, "a whole number >= 1")
    if intervals.size * replicas > MAX_LANES:
        raise ResiliencyConfigError("plan", "replicas", replicas, f"intervals x replicas <= {MAX_LANES}")
    if local_s is not None and not (math.isfinite(local_s) and local_s > 0):
        raise ResiliencyConfigError("plan", "local save interval", local_s, "a finite number > 0")
    if not mech.saves_complete:
        return SimulationResult(intervals, np.zeros((intervals.size, replicas)), 0, params.wall_s)

    rng = np.random.default_rng(seed)
    lam = failures.cluster_rates(params.gpus)
    total_rate = sum(lam.values())
    costs = fault_costs(params, mech)
    # A renewal cycle: an attempt (the fault clock runs from its start) and the fault's detection after it.
    cycle_s = (
        math.inf if total_rate <= 0 else 1.0 / total_rate + sum(lam[c] / total_rate * costs[c].detect_s for c in lam)
    )
    total_t = min(params.wall_s, MAX_EXPECTED_FAULTS * cycle_s)
    cum = np.cumsum([lam[c] / total_rate for c in FAULT_CLASSES]) if total_rate > 0 else None
    detect = np.array([costs[c].detect_s for c in FAULT_CLASSES])
    restart = np.array([costs[c].restart_s for c in FAULT_CLASSES])
    redo = np.array([_REDO[costs[c].redo_from] for c in FAULT_CLASSES])
    budget = np.array([costs[c].uses_budget for c in FAULT_CLASSES])
    use_local = local_s is not None and mech.local_checkpoints and params.local_save_time_s is not None
    in_place = params.restart_s + params.load_time_s

    tau = np.repeat(intervals, replicas)
    n = tau.size
    rate = np.array([training_rate(params, x, local_s if use_local else None) for x in intervals]).repeat(replicas)
    if mech.crash_at_first_save:
        rate[:] = 1.0  # the attempt ends at its first save: no save stalls before it
    lag_work = params.save_lag_s * rate
    t = np.zeros(n)  # wall clock at the start of the lane's current attempt
    pos = np.zeros(n)  # training (work seconds) the current attempt starts from
    last_p = np.zeros(n)  # newest usable persistent checkpoint
    startup = np.zeros(n)  # the current attempt's restart + load (+ a person, + a requeue)
    used = np.zeros(n, dtype=np.int64)  # restarts used from the pool
    final = np.full(n, np.nan)
    active = np.ones(n, dtype=bool)

    # A crash loop (Megatron Bridge's heartbeat-only defaults) ends thousands of identical attempts by
    # itself: runs of them are jumped over in one step. The number of attempts that end by themselves
    # before one is hit by a fault is floor(G / cycle) for G ~ Exp(total_rate) (memoryless faults), and the
    # attempt after them is hit at G - k x cycle into it: carried over as `pending`, so no draw is wasted.
    cycle, cycle_gain = _self_cycle(params, mech, tau, rate, in_place)
    pending = np.full(n, np.nan)
    # Bound: faults per lane ~ the cycles that fit (Poisson-like), each followed by at most one jump; 10 sigma.
    mean_attempts = 0.0 if total_rate <= 0 else total_t / cycle_s
    max_iter = int(2 * (mean_attempts + 10 * math.sqrt(mean_attempts + 1)) + 100)
    iterations = 0
    for iterations in range(1, max_iter + 1):  # noqa: B007 - the count is reported
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        m = idx.size
        fresh = rng.exponential(1.0 / total_rate, m) if total_rate > 0 else np.full(m, np.inf)
        carried = pending[idx]
        fault_at = np.where(np.isnan(carried), fresh, carried)
        pending[idx] = np.nan
        draw = rng.random(m)
        cls = np.searchsorted(cum, draw, side="right").clip(0, len(FAULT_CLASSES) - 1) if cum is not None else 0
        c_start, x0, tau_i, r_i = startup[idx], pos[idx], tau[idx], rate[idx]
        self_at = np.full(m, np.inf)
        next_save = (np.floor(x0 / tau_i + 1e-9) + 1.0) * tau_i
        save_done_at = c_start + (next_save - x0) + params.save_time_s
        if mech.crash_at_first_save:
            self_at = save_done_at
        if mech.attempt_cap_s is not None:
            self_at = np.minimum(self_at, mech.attempt_cap_s)
        remaining = total_t - t[idx]
        end = np.minimum(np.minimum(fault_at, self_at), remaining)
        work = x0 + r_i * np.maximum(0.0, end - c_start)
        over = remaining <= np.minimum(fault_at, self_at)
        is_self = ~over & (self_at <= fault_at)
        if mech.crash_at_first_save:
            work = np.where(is_self, np.minimum(work, next_save), work)
        # Newest persistent checkpoint written in this attempt and finished writing by `end`.
        cand = np.floor((work - lag_work[idx]) / tau_i + 1e-9) * tau_i
        saved_p = np.where(cand > x0, cand, last_p[idx])
        if mech.crash_at_first_save:
            saved_p = np.where(is_self & (save_done_at <= end + 1e-9), next_save, saved_p)
        if use_local:
            cand_l = np.floor(work / local_s + 1e-9) * local_s
            saved_l = np.maximum(np.maximum(cand_l, x0), saved_p)
        else:
            saved_l = saved_p
        kind = redo[cls]
        restart_from = np.where(kind == 0, saved_p, np.where(kind == 1, saved_l, work))
        restart_from = np.where(is_self, saved_p, restart_from)
        new_start = np.where(is_self, in_place, restart[cls])
        gap = np.where(is_self, 0.0, detect[cls])
        used_i = used[idx] + np.where(is_self, True, budget[cls])
        exhausted = used_i >= mech.restart_pool
        new_start = new_start + np.where(exhausted, params.human_s, 0.0)
        used_i = np.where(exhausted, 0, used_i)

        done = idx[over]
        final[done] = work[over]
        active[done] = False
        go = ~over
        j = idx[go]
        t[j] += end[go] + gap[go]
        pos[j] = restart_from[go]
        last_p[j] = saved_p[go]
        startup[j] = new_start[go]
        used[j] = used_i[go]
        jump = j[is_self[go]] if cycle is not None else j[:0]
        if jump.size:
            g = rng.exponential(1.0 / total_rate, jump.size) if total_rate > 0 else np.full(jump.size, np.inf)
            # The first jumped attempt may carry a person's delay (already in `startup`); later ones do not.
            extra = startup[jump] - in_place
            fits = np.maximum(0.0, total_t - t[jump] - extra)
            pool = mech.restart_pool
            # Attempts that still fit before the end of the run, each with its share of a person's delay.
            k = np.minimum(np.floor(g / cycle[jump]), np.floor(fits / (cycle[jump] + params.human_s / pool)))
            total_used = used[jump] + k
            people = np.floor(total_used / pool)
            t[jump] += k * cycle[jump] + np.where(k > 0, extra, 0.0) + people * params.human_s
            pos[jump] += k * cycle_gain[jump]
            last_p[jump] = pos[jump]
            used[jump] = (total_used % pool).astype(np.int64)
            startup[jump] = np.where(k > 0, in_place, startup[jump])
            pending[jump] = np.where(np.isfinite(g), g - k * cycle[jump], np.nan)
        # A lane whose next attempt would start after the end keeps what it has.
        late = j[t[j] >= total_t]
        final[late] = pos[late]
        active[late] = False
    if active.any():  # the bound was hit (not expected): count what those lanes had kept
        final[active] = pos[active]
    good = np.clip(final / total_t, 0.0, 1.0) * reserve_factor(params, mech)
    return SimulationResult(intervals, good.reshape(intervals.size, replicas), iterations, total_t)


def _self_cycle(
    params: RunParams, mech: MechanismSet, tau: np.ndarray, rate: np.ndarray, in_place: float
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Length and kept training of one attempt that ends by itself, per lane (None: attempts never do)."""
    if mech.crash_at_first_save:
        length = in_place + tau + params.save_time_s
        gain = tau.copy()
        if mech.attempt_cap_s is not None:
            killed = length > mech.attempt_cap_s
            length = np.where(killed, mech.attempt_cap_s, length)
            gain = np.where(killed, 0.0, gain)
        return length, gain
    if mech.attempt_cap_s is not None:
        trained = rate * max(0.0, mech.attempt_cap_s - in_place) - params.save_lag_s * rate
        return np.full(tau.shape, mech.attempt_cap_s), np.maximum(0.0, np.floor(trained / tau + 1e-9) * tau)
    return None, None
