"""What NVRx's ``ft_launcher`` is given: the NeMo-Run launcher object and the config file with sections.

NeMo-Run's ``run.FaultTolerance`` can only pass heartbeat timeouts, the check interval, the termination
signal, the log level and ``--max-restarts`` (``nemo_run/run/torchx_backend/components/ft_launcher.py``). A
Megatron Bridge job is *section* based (``setup`` / ``step`` / ``checkpointing``) and sends no heartbeats, so
with those flags alone NVRx 0.7 monitors no section and kills a healthy job once
``initial_rank_heartbeat_timeout`` passes. The section timeouts therefore travel in an NVRx config file
(top-level ``fault_tolerance:`` key) that ``ft_launcher`` reads from ``PET_FT_CFG_PATH`` (torchelastic's env
fallback of ``--ft-cfg-path``; ``FAULT_TOL_CFG_PATH``, which NeMo-Run's Slurm template exports, is ignored by
NVRx 0.7). Command-line flags override the file, so a value is never given both ways with different values.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nemo_run.core.execution.launcher import FaultTolerance

CONFIG_PATH_ENV = "PET_FT_CFG_PATH"
MAX_RESTARTS_ENV = "PET_MAX_RESTARTS"
#: The file Megatron Bridge writes into ``checkpoint.save`` after each completed global save, holding the
#: iteration as text (``training/checkpointing.py``, ``save_checkpoint``: the train-state finalize step).
#: NVRx's progress tracker reads it (``checkpoint_iteration_file``); without it the tracker stays inactive.
ITERATION_FILE = "latest_checkpointed_iteration.txt"
#: ft_launcher's exit code when NVRx decides the job must not be restarted (no progress across restarts, or an
#: attribution stop): NVRx 0.7's ``DEFAULT_NO_RESTART_EXIT_CODE``, pinned by tests/contract/test_nvrx_launcher.py.
#: NeMo-Run's launcher cannot pass ``--ft-no-restart-exit-code`` (and it has no environment fallback), so every
#: job launched through NeMo-Run exits with NVRx's default: :func:`no_restart_exit_code` reads it from the NVRx
#: installed here, and this tested value is used where NVRx is not installed (a launching host).
NO_RESTART_EXIT_CODE = 93
#: Where NVRx defines it (read as source text: importing NVRx imports torch, which a launching host lacks).
_NO_RESTART_SOURCE = ("fault_tolerance", "utils.py")
_NO_RESTART_NAME = "DEFAULT_NO_RESTART_EXIT_CODE"
#: NVRx's ``FaultToleranceConfig`` (``fault_tolerance/config.py``): the keys ft_launcher's config file may hold. NVRx
#: reads the file with ``ignore_not_recognized=True``, so a misspelt key is dropped without a word: the plugin
#: checks every extra key against the installed class's own fields, read as source text like the exit code above.
_CONFIG_SOURCE = ("fault_tolerance", "config.py")
_CONFIG_CLASS = "FaultToleranceConfig"
#: NVRx 0.7.0's fields, for a launching host without NVRx (pinned by tests/unit/test_nvrx_config_keys.py).
TESTED_CONFIG_KEYS = frozenset(
    """workload_check_interval initial_rank_heartbeat_timeout rank_heartbeat_timeout rank_section_timeouts
    rank_out_of_section_timeout node_health_check_interval safety_factor rank_termination_signal log_level
    restart_check_interval enable_nic_monitor enable_nic_healthcheck enable_dist_storage_healthcheck
    storage_healthcheck_path pci_topo_file link_down_path_template link_state_path_template skip_section_response
    segment numa_bind_strict gpu_memory_reclaim_timeout gpu_memory_tolerance_mb gpu_memory_poll_interval
    check_remaining_processes max_no_progress_cycles min_progress_iterations checkpoint_iteration_file
    install_exception_hook num_warmup_iterations attribution_endpoint attribution_stop_action
    attribution_export_url cycle_info_dir segment_health_check_dir""".split()
)
#: Keys the plugin writes from its own fields: set those fields instead.
OWNED_CONFIG_KEYS = {
    "rank_section_timeouts": "section_timeouts",
    "rank_out_of_section_timeout": "out_of_section_timeout",
    "initial_rank_heartbeat_timeout": "initial_rank_heartbeat_timeout",
    "rank_heartbeat_timeout": "rank_heartbeat_timeout",
    "workload_check_interval": "workload_check_interval",
    "rank_termination_signal": "rank_termination_signal",
    "log_level": "log_level",
    "max_no_progress_cycles": "max_no_progress_cycles",
    "checkpoint_iteration_file": "checkpoint_dir",
}


@functools.lru_cache(maxsize=1)
def no_restart_exit_code() -> tuple[int, str]:
    """(NVRx's no-restart exit code, where it came from): read from the installed NVRx's source without importing
    it; the tested value (NVRx 0.7.0) when NVRx is not installed here. An installed NVRx that no longer defines it
    as a plain integer is reported in the second item, and the tested value is kept."""
    path = _installed_nvrx_file(_NO_RESTART_SOURCE)
    if path is None:
        return NO_RESTART_EXIT_CODE, f"NVRx is not installed here: the tested NVRx 0.7.0's {NO_RESTART_EXIT_CODE}"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError) as err:
        return NO_RESTART_EXIT_CODE, f"cannot read {path} ({err}): the tested NVRx 0.7.0's {NO_RESTART_EXIT_CODE}"
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == _NO_RESTART_NAME for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int
        ):
            return node.value.value, f"NVRx's {_NO_RESTART_NAME} in {path}"
    return NO_RESTART_EXIT_CODE, (
        f"the installed NVRx has no integer {_NO_RESTART_NAME} in {path} (tested: NVRx 0.7.0): "
        f"kept {NO_RESTART_EXIT_CODE}"
    )


def _installed_nvrx_file(parts: tuple[str, str]) -> Path | None:
    try:
        spec = importlib.util.find_spec("nvidia_resiliency_ext")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)), *parts)


@functools.lru_cache(maxsize=1)
def config_keys() -> tuple[frozenset[str], str]:
    """(the keys NVRx's config file may hold, where they came from): the installed NVRx's ``FaultToleranceConfig``
    fields, read from its source without importing it; NVRx 0.7.0's where NVRx is not installed here or its class
    cannot be read."""
    path = _installed_nvrx_file(_CONFIG_SOURCE)
    if path is None:
        return TESTED_CONFIG_KEYS, "NVRx is not installed here: the tested NVRx 0.7.0's keys"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError) as err:
        return TESTED_CONFIG_KEYS, f"cannot read {path} ({err}): the tested NVRx 0.7.0's keys"
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == _CONFIG_CLASS:
            keys = {
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }
            if keys:
                return frozenset(keys), f"NVRx's {_CONFIG_CLASS} in {path}"
    return TESTED_CONFIG_KEYS, f"no {_CONFIG_CLASS} with fields in {path}: the tested NVRx 0.7.0's keys"


def config_key_types() -> dict[str, str]:
    """Each field of the installed NVRx's ``FaultToleranceConfig`` -> its annotation as written (``"bool"``,
    ``"Optional[float]"``), read from its source like :func:`config_keys`; empty when the class cannot be read."""
    path = _installed_nvrx_file(_CONFIG_SOURCE)
    try:
        tree = ast.parse(path.read_text()) if path is not None else None
    except (OSError, SyntaxError):
        tree = None
    for node in tree.body if tree is not None else []:
        if isinstance(node, ast.ClassDef) and node.name == _CONFIG_CLASS:
            return {
                item.target.id: ast.unparse(item.annotation)
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }
    return {}


#: The largest integer a config value may be (NVRx's counters and intervals; YAML and C longs hold it).
MAX_CONFIG_INT = 2**63 - 1


def value_problem(annotation: str, value: Any) -> str | None:
    """What ``value`` must be for a field annotated ``annotation`` (None: it fits). NVRx casts nothing: a YAML
    ``"false"`` reaches a bool field as a truthy string, ``"abc"`` a float field as text."""
    text = annotation.replace(" ", "")
    optional = text.startswith("Optional[") or "None" in text.split("|")
    base = text.removeprefix("Optional[").removesuffix("]") if text.startswith("Optional[") else text.split("|")[0]
    if value is None:
        return None if optional else f"a {base} ({annotation}: None is not allowed)"
    is_int = isinstance(value, int) and not isinstance(value, bool)
    checks = {
        "bool": (isinstance(value, bool), "True or False (a YAML bool, not a string)"),
        "int": (is_int and abs(value) <= MAX_CONFIG_INT, f"an integer of at most {MAX_CONFIG_INT}"),
        "float": (
            (is_int and abs(value) <= MAX_CONFIG_INT) or (isinstance(value, float) and math.isfinite(value)),
            "a finite number",
        ),
        "str": (isinstance(value, str), "a string"),
    }
    if base not in checks:
        return None
    ok, allowed = checks[base]
    return None if ok else allowed + (" or None" if optional else "") + f" (NVRx's field is {annotation})"


def launcher(
    *,
    max_restarts: int,
    workload_check_interval: float,
    rank_termination_signal: str,
    log_level: str,
    initial_rank_heartbeat_timeout: float | None,
    rank_heartbeat_timeout: float | None,
) -> FaultTolerance:
    """The ``run.FaultTolerance`` launcher.

    ``workload_check_interval`` is always set (it is never falsy): if every field NeMo-Run knows were None it
    would emit ``--ignore-missing-fault-tol-cfg``, which NVRx >= 0.5 rejects. ``max_restarts=0`` is dropped by
    NeMo-Run (``if max_restarts:``), which is why the plugin also sets ``PET_MAX_RESTARTS``.
    """
    return FaultTolerance(
        max_restarts=max_restarts,
        workload_check_interval=float(workload_check_interval),
        rank_termination_signal=rank_termination_signal.upper(),
        log_level=log_level.upper(),
        initial_rank_heartbeat_timeout=initial_rank_heartbeat_timeout,
        rank_heartbeat_timeout=rank_heartbeat_timeout,
    )


def config_file(
    *,
    section_timeouts: Mapping[str, float | None],
    out_of_section_timeout: float | None,
    max_no_progress_cycles: int,
    workload_check_interval: float,
    rank_termination_signal: str,
    log_level: str,
    initial_rank_heartbeat_timeout: float | None,
    rank_heartbeat_timeout: float | None,
    plugin: str,
    checkpoint_iteration_file: str | None = None,
    extra: Mapping[str, bool | int | float | str | None] | None = None,
) -> str:
    """The NVRx fault-tolerance YAML. Every value is a validated number or identifier, written literally; ``extra``
    holds more of NVRx's keys (checked by the plugin against :func:`config_keys`), each value a JSON scalar, which
    is a YAML scalar of the same value."""
    lines = [
        f"# Written by nemo-resiliency-plugins {plugin} for NVRx ft_launcher (read through {CONFIG_PATH_ENV}).",
        "fault_tolerance:",
        "  rank_section_timeouts:" + ("" if section_timeouts else " {}"),
    ]
    for name, seconds in section_timeouts.items():
        lines.append(f"    {name}: {_number(seconds)}")
    lines += [
        f"  rank_out_of_section_timeout: {_number(out_of_section_timeout)}",
        f"  initial_rank_heartbeat_timeout: {_number(initial_rank_heartbeat_timeout)}",
        f"  rank_heartbeat_timeout: {_number(rank_heartbeat_timeout)}",
        f"  workload_check_interval: {_number(workload_check_interval)}",
        f"  rank_termination_signal: {rank_termination_signal.upper()}",
        f"  log_level: {log_level.upper()}",
        f"  max_no_progress_cycles: {int(max_no_progress_cycles)}",
    ]
    if checkpoint_iteration_file is not None:
        # A JSON string is a YAML double-quoted scalar: any path is written exactly, nothing in it is interpreted.
        lines.append(f"  checkpoint_iteration_file: {json.dumps(checkpoint_iteration_file)}")
    for key, value in (extra or {}).items():
        lines.append(f"  {key}: {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def _number(value: float | None) -> str:
    return "null" if value is None else repr(float(value))
