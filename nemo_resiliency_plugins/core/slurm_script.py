"""What plugins add to a Slurm job's sbatch script: bash blocks in ``executor.setup_lines`` (the only hook
NeMo-Run gives before its template's last lines) and the reading of Slurm's ``--time`` values.

Kept apart from :mod:`executor_config` because these blocks are shell programs with their own rules (quoting,
traps chained with the user's, functions standing in for ``srun``/``scontrol``), tested with real bash and a
real local Slurm.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any

import nemo_run as run

from nemo_resiliency_plugins.errors import ResiliencyConfigError


def _block(name: str) -> str:
    """The text of ``sbatch/<name>``: bash kept in .sh files so it can be read and linted as shell (shellcheck).

    Each file's first line is the mark that tells whether a job already has the block; shellcheck's own
    directive lines are left out of the job's script.
    """
    text = (resources.files("nemo_resiliency_plugins.core") / "sbatch" / name).read_text()
    return "\n".join(line for line in text.rstrip("\n").split("\n") if not line.lstrip().startswith("# shellcheck "))


def _is_slurm(executor: Any) -> bool:
    return isinstance(executor, run.SlurmExecutor)


# ------------------------------------------------------------------------------------- Slurm time limit

_SLURM_TIME = re.compile(r"(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?")


def slurm_time_limit_seconds(value: Any) -> int | None:
    """Seconds in a Slurm ``--time`` value; None for no limit (``UNLIMITED``/``INFINITE``, empty, or ``0``:
    "a time limit of zero requests that no time limit be imposed", sbatch(1)).

    Slurm's forms: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``. Raises ``ValueError`` for
    anything else, so a plugin can report the executor's value instead of guessing.
    """
    if value is None:
        return None
    text = str(value)
    if text == "" or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _SLURM_TIME.fullmatch(text)
    if not m:
        raise ValueError(f"not a Slurm time limit: {value!r}")
    d, a, b, c = (int(m.group(k)) if m.group(k) is not None else None for k in ("d", "a", "b", "c"))
    if d is not None:  # D-H, D-H:M, D-H:M:S
        seconds = ((d * 24 + a) * 60 + (b or 0)) * 60 + (c or 0)
    elif c is not None:  # H:M:S
        seconds = (a * 60 + b) * 60 + c
    elif b is not None:  # M:S
        seconds = a * 60 + b
    else:  # M
        seconds = a * 60
    return seconds or None


# ------------------------------------------------------------- NeMo-Run's ft_launcher template and requeue

_REQUEUE_GUARD_MARK = "# nemo-resiliency-plugins: requeue guard"

# Shared by both blocks: they add to what the user's setup_lines already did instead of replacing it. A trap
# the user set for the same signal still runs, and a user's own shell function of the same name as one the
# block defines (srun, scontrol) is kept and called in place of the program.
_CHAIN_HELPERS_MARK = "# nemo-resiliency-plugins: chaining helpers"
_CHAIN_HELPERS = _block("chain_helpers.sh")


def check_setup_lines(executor: Any, *, plugin: str) -> None:
    """``executor.setup_lines`` must be text (or None) before a block is added to it: NeMo-Run pastes it into the
    sbatch script as it is, and a block can only be added to text."""
    value = executor.setup_lines
    if value is not None and not isinstance(value, str):
        raise ResiliencyConfigError(plugin, "executor.setup_lines", value, "a string of shell lines, or None")


def _add_chain_helpers(executor: Any) -> None:
    existing = executor.setup_lines or ""
    if _CHAIN_HELPERS_MARK not in existing:
        executor.setup_lines = (existing.rstrip("\n") + "\n" if existing else "") + _CHAIN_HELPERS


# The guard reads the step's own log for what its exit code cannot say on several nodes (step_verdict.sh), from the
# launchers' lines only: every pattern it reads is defined once in log_lines.sh (set before any function runs).
_REQUEUE_GUARD = _block("requeue_guard.sh") + "\n" + _block("log_lines.sh") + "\n" + _block("step_verdict.sh")


def guard_ft_requeue(executor: Any, *, plugin: str) -> None:
    """Stop NeMo-Run's ft_launcher sbatch template from requeueing a Slurm job that finished.

    The template (``ft_launcher_slurm.j2``) requeues after every run unless the finished-flag file exists or
    ``retries`` failures are in the job's results file. Megatron Bridge never writes the flag, so a
    successful run is requeued forever (each run resumes at the last iteration and succeeds again). The guard
    is a bash function in ``setup_lines`` (the only hook NeMo-Run gives before the template's last lines):
    it intercepts the template's ``scontrol requeue`` and, when the step exited 0 and the batch shell did not
    receive the preemption signal (:func:`forward_batch_signal_to_tasks` records it), writes the flag and
    skips the requeue. A failed step is requeued as before (up to ``retries`` failures); a step that exited 0
    after the preemption signal (saved and exited) is requeued to continue training. If such a job had in
    fact just finished, the next run resumes at the last iteration, exits 0 at once and ends there.
    Two more template traps are fixed in the same block (both seen on the local Slurm): the template counts
    the failed run itself against ``TORCHX_MAX_RETRIES`` (``retries=1`` never requeued; ``retries=0`` not
    even after a preemption), so the block adds one; and a job out of retries fell off the script's end
    and was reported COMPLETED with exit code 0, so an EXIT trap ends it with the step's exit code.
    On several nodes srun's exit code is the highest task code or 128+signal (NeMo-Run runs it with
    ``--kill-on-bad-exit=1``), so NVRx's no-restart code on one node reaches the batch shell as 143: the guard
    also takes NVRx's "must not be restarted (<reason>)" line in the launchers' log, from any node, as the
    verdict (NVRx 0.7 writes it nowhere else) and ends the job FAILED with the no-restart code, no node excluded.
    A step that exited 0 on Megatron Bridge's straggler stop ("Exiting program due to straggler detection.") is
    requeued with the node of the last report's straggler ranks excluded, or ends FAILED when no such node can
    be excluded (``step_verdict.sh`` says how a rank is mapped to its node).
    Trade-off: a Megatron Bridge run that exits 0 on its own before the end (``train.exit_duration_in_mins``,
    ``train.exit_interval``) is treated as finished.
    """
    if not _is_slurm(executor):
        return
    check_setup_lines(executor, plugin=plugin)
    if _REQUEUE_GUARD_MARK in (executor.setup_lines or ""):
        return
    problem = template_problem()
    if problem is not None:
        raise ResiliencyConfigError(plugin, "executor", "SlurmExecutor", detail=problem)
    _add_chain_helpers(executor)
    existing = executor.setup_lines
    executor.setup_lines = existing.rstrip("\n") + "\n" + _REQUEUE_GUARD


_SPARE_NODES_MARK = "# nemo-resiliency-plugins: spare nodes"
_SPARE_NODES = _block("spare_nodes.sh")


def install_spare_nodes_block(executor: Any, *, plugin: str) -> None:
    """Add the bash of ``sbatch/spare_nodes.sh`` after the requeue guard: it gives ft_launcher ``--nnodes
    <active>:<all>`` and tells a step that finished after a spare replaced a lost node from a failed one (it reads
    the launchers' log through the guard's ``nrp_step_log``, so the guard must be there first)."""
    check_setup_lines(executor, plugin=plugin)
    existing = executor.setup_lines or ""
    if _SPARE_NODES_MARK in existing:
        return
    if _REQUEUE_GUARD_MARK not in existing:
        raise ResiliencyConfigError(plugin, None, detail="internal: the spare-node block needs the requeue guard first")
    executor.setup_lines = existing.rstrip("\n") + "\n" + _SPARE_NODES


#: What the requeue guard takes from NeMo-Run 0.11.1's sbatch templates (``slurm.sh.j2`` and the
#: ``ft_launcher_slurm.j2`` macros it imports): each name with a pattern that must match the script outside this
#: package's own blocks (multi-line mode). A NeMo-Run that renames one would leave the guard's function reading an
#: empty variable or standing in for a call nobody makes: jobs requeued for ever, or never.
TEMPLATE_CONTRACT: dict[str, str] = {
    "TORCHX_MAX_RETRIES": r"^export TORCHX_MAX_RETRIES=",
    "exitcode": r"^\s*exitcode=\$\?",
    "ANY_JOB_STEP_FAILED": r"^\s*ANY_JOB_STEP_FAILED=",
    "JOB_RESULTS_FILE": r"^\s*JOB_RESULTS_FILE=",
    "FAULT_TOL_FINISHED_FLAG_FILE": r"^export FAULT_TOL_FINISHED_FLAG_FILE=",
    "scontrol requeue": r"^\s*scontrol requeue ",
}
#: The templates NeMo-Run renders an ft_launcher sbatch script from (``nemo_run.core.execution`` package data).
TEMPLATE_FILES = ("slurm.sh.j2", "ft_launcher_slurm.j2")


def _nemo_run_version() -> str:
    from nemo_resiliency_plugins.core.versions import nemo_run_version

    return nemo_run_version()


def missing_template_names(text: str) -> list[str]:
    """The :data:`TEMPLATE_CONTRACT` names ``text`` (a rendered script, or the templates' source) lacks, looking
    only outside this package's blocks (they mention the same names)."""
    for block in (_REQUEUE_GUARD, _CHAIN_HELPERS):
        text = text.replace(block, "")
    return [name for name, pattern in TEMPLATE_CONTRACT.items() if re.search(pattern, text, re.MULTILINE) is None]


def _contract_problem(missing: list[str], where: str) -> str:
    return (
        f"{where} of NeMo-Run {_nemo_run_version()} lacks {', '.join(missing)}, which the Slurm requeue guard of "
        "FaultTolerancePlugin relies on (NeMo-Run 0.11.1's ft_launcher sbatch template); without them a job would be "
        "requeued for ever or never. Install a NeMo-Run in the tested range (nemo-run>=0.11.1,<0.12)"
    )


def rendered_script_problem(script: str) -> str | None:
    """For a rendered sbatch script (``explain``, the contract tests): why the requeue guard in it cannot work,
    or None (no guard in it, or every name it relies on is there)."""
    if _REQUEUE_GUARD_MARK not in script:
        return None
    missing = missing_template_names(script)
    return _contract_problem(missing, "the sbatch script") if missing else None


@functools.lru_cache(maxsize=1)
def template_problem() -> str | None:
    """At set-up, before anything is rendered: the same check on the templates NeMo-Run will render from."""
    try:
        folder = resources.files("nemo_run.core.execution") / "templates"
        text = "\n".join((folder / name).read_text() for name in TEMPLATE_FILES)
    except (OSError, ModuleNotFoundError) as err:
        return _contract_problem(list(TEMPLATE_CONTRACT), f"the sbatch templates ({err})")
    missing = missing_template_names(text)
    return _contract_problem(missing, f"the sbatch templates {', '.join(TEMPLATE_FILES)}") if missing else None


# ------------------------------------------------------------------- Slurm signal to the step's tasks only

_FORWARD_MARK = "# nemo-resiliency-plugins: signal forwarding"

_FORWARD = _block("forward_signal.sh")


def forward_batch_signal_to_tasks(executor: Any, signal_name: str, *, plugin: str) -> None:
    """Make a ``--signal=B:<signal_name>@N`` batch-shell signal reach the job steps' task processes only.

    Why not plain ``--signal=<sig>@N``: Slurm then signals every process of the step, including NVRx's rank
    monitors (children of ``ft_launcher``), which close on SIGTERM/SIGINT/SIGUSR1/SIGUSR2; the ranks' next
    section message (Megatron Bridge's ``on_checkpointing_start/end`` around the save) raises
    ``RankMonitorClientError`` and the preemption checkpoint is lost (measured on the local Slurm). Signalling
    only the task processes lets the launcher forward the signal to its ranks and keep the monitors until
    they have saved. ``signal_name`` is a name without ``SIG`` (``TERM``); it goes into shell code, so only
    plain names are accepted.
    """
    if not _is_slurm(executor):
        return
    if not re.fullmatch(r"[A-Z][A-Z0-9]*", signal_name or ""):
        raise ResiliencyConfigError(plugin, None, detail=f"internal: bad signal name {signal_name!r}")
    check_setup_lines(executor, plugin=plugin)
    existing = executor.setup_lines or ""
    # The signal is forwarded first; a trap the user's setup_lines set for it runs after.
    # (nrp_forward_signal runs NRP_USER_SIGNAL_TRAP, captured just before).
    trap = f"trap 'nrp_forward_signal {signal_name}' {signal_name}"
    if _FORWARD_MARK in existing:
        if trap not in existing:
            raise ResiliencyConfigError(
                plugin,
                None,
                signal_name,
                detail="the job already forwards another batch signal to its tasks; use one exit signal per job",
            )
        return
    _add_chain_helpers(executor)
    executor.setup_lines = (
        executor.setup_lines.rstrip("\n") + f"\n{_FORWARD}\nNRP_USER_SIGNAL_TRAP=$(nrp_trap_of {signal_name})\n{trap}"
    )
