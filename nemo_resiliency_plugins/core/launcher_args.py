"""Extra ft_launcher flags (``FaultTolerancePlugin(launcher_args=...)``): checked against the installed NVRx's own
argument parser, and put on the launch line where NeMo-Run's rendering leaves a way to.

NeMo-Run 0.11.1's ``run.FaultTolerance`` launcher writes a fixed flag set (its ``ft_launcher`` torchx component:
the five rank-monitor fields, ``--max-restarts`` and torchrun's rendezvous/size flags), and nothing of NeMo-Run
adds a word to that command. NVRx's newer launcher features are flags only (issue 49: ``--ft-fact-*``,
``--ft-node-state-url``, the log funnel), so this module

* checks each flag against ``get_args_parser()`` of the NVRx installed here (no copy of the flag list is kept: a
  flag the installed NVRx does not have is refused, naming its version), refuses flags NeMo-Run or the plugin
  already writes (naming the plugin field that owns them) and values that are not plain shell words, then lets
  NVRx's parser read the result, so a value NVRx would reject is refused at set-up and not in the job;
* on Slurm, adds an sbatch block (``sbatch/launcher_args.sh``) that stands in for ``srun`` and puts the flags right
  after the ``ft_launcher`` word of the launch line. Every other executor starts ft_launcher from an argument list
  NeMo-Run builds from the launcher's fields alone (LocalExecutor: a ``Popen`` argv, no shell), so the flags are
  refused there with that reason.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib.metadata
import io
import math
import re
from collections.abc import Mapping
from typing import Any

from nemo_resiliency_plugins.core.slurm_script import _add_chain_helpers, _block, check_setup_lines
from nemo_resiliency_plugins.core.validation import SHELL_WORD_TEXT
from nemo_resiliency_plugins.errors import ResiliencyConfigError

#: A flag's name as the plugin takes it: without the leading dashes (``"ft-fact-window"``), full match.
FLAG_NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
#: A value: a shell word (:data:`validation.SHELL_WORD`'s characters) that does not start with ``-`` (argparse would
#: take it for a flag), or a plain number. Full match only.
FLAG_VALUE = re.compile(r"[A-Za-z0-9_@%+=:,./][A-Za-z0-9_@%+=:,./-]*|-?[0-9]+(?:\.[0-9]+)?")
FLAG_VALUE_TEXT = f"{SHELL_WORD_TEXT} not starting with '-' (or a number)"

#: NVRx main's scheduler-exclusion flag: refused whatever the installed NVRx has (why: :data:`EXCLUSION_WHY`).
EXCLUSION_DIR_FLAG = "ft-scheduler-exclusion-dir"
EXCLUSION_WHY = (
    "NVRx's scheduler exclusion assumes Slurm job arrays run with --no-requeue (an array task's first node fails "
    "its health check so spares replace the whole task), the opposite of this plugin's requeue guard, which "
    "requeues the same job (num_job_retries_on_failure) and excludes the failed node itself (exclude_failed_nodes)"
)

#: ft_launcher's options (by argparse ``dest``, so both spellings NVRx accepts are covered) that NeMo-Run's
#: FaultTolerance launcher or this plugin already sets: the owner to change instead. A second value on the line
#: would silently win over (or lose to) the first.
OWNED_DESTS: dict[str, str] = {
    "max_restarts": "FaultTolerancePlugin.num_in_job_restarts",
    "ft_workload_check_interval": "FaultTolerancePlugin.workload_check_interval",
    "ft_initial_rank_heartbeat_timeout": "FaultTolerancePlugin.initial_rank_heartbeat_timeout",
    "ft_rank_heartbeat_timeout": "FaultTolerancePlugin.rank_heartbeat_timeout",
    "ft_rank_termination_signal": "FaultTolerancePlugin.rank_termination_signal",
    "ft_log_level": "FaultTolerancePlugin.log_level",
    "ft_rank_section_timeouts": "FaultTolerancePlugin.section_timeouts",
    "ft_rank_out_of_section_timeout": "FaultTolerancePlugin.out_of_section_timeout",
    "ft_max_no_progress_cycles": "FaultTolerancePlugin.max_no_progress_cycles",
    "ft_checkpoint_iteration_file": "FaultTolerancePlugin.checkpoint_dir",
    "ft_cfg_path": "FaultTolerancePlugin (its config file, through PET_FT_CFG_PATH; add keys with nvrx_config)",
    "ft_ignore_missing_cfg": "FaultTolerancePlugin (it always gives ft_launcher a config file)",
    "rdzv_conf": "FaultTolerancePlugin.spare_nodes (the spare block's --rdzv-conf) and NeMo-Run's rendezvous",
    "rdzv_backend": "executor.launcher.rdzv_backend (run.FaultTolerance)",
    "rdzv_endpoint": "NeMo-Run's launch (the job's head node and executor.launcher.rdzv_port)",
    "rdzv_id": "executor.launcher.rdzv_id (run.FaultTolerance)",
    "standalone": "NeMo-Run's launch (it writes the rendezvous flags itself)",
    "nnodes": "executor.nodes (and FaultTolerancePlugin.spare_nodes)",
    "nproc_per_node": "executor.ntasks_per_node / nproc_per_node",
    "node_rank": "NeMo-Run's launch (each node's rank)",
    "tee": "NeMo-Run's launch (--tee 3)",
    "module": "the task (run.Script(m=True))",
    "no_python": "the task (run.Script(entrypoint=...))",
    "run_path": "the task",
}

_SHIM_MARK = "# nemo-resiliency-plugins: launcher args"
_SHIM = _block("launcher_args.sh")
ARRAY_NAME = "NRP_FT_LAUNCHER_ARGS"


def nvrx_version() -> str:
    """The installed NVRx's version, for messages."""
    try:
        return importlib.metadata.version("nvidia-resiliency-ext")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


@functools.lru_cache(maxsize=1)
def nvrx_parser() -> tuple[Any, str | None]:
    """(the installed NVRx ft_launcher's argparse parser, None) or (None, why it cannot be had here). Imported only
    when flags are given: NVRx's launcher imports torch, which takes seconds."""
    try:
        from nvidia_resiliency_ext.fault_tolerance.launcher import get_args_parser
    except Exception as err:  # noqa: BLE001 - any import failure means: cannot check here
        return None, f"NVRx's launcher cannot be imported here ({type(err).__name__}: {err})"
    return get_args_parser(), None


def _options(parser: Any) -> dict[str, Any]:
    """Option string -> argparse action, read from the parser itself."""
    return {option: action for action in parser._actions for option in action.option_strings}


def flag_words(
    flags: Mapping[str, Any] | None, *, plugin: str, field: str, nvrx_config: Mapping[str, Any] | None = None
) -> list[str]:
    """The words ``flags`` add to ft_launcher's line (``{"term-timeout": 600}`` -> ``["--term-timeout", "600"]``),
    each checked as the module docstring says; one ``ResiliencyConfigError`` on the first that is not fine."""
    if not flags:
        return []
    if not isinstance(flags, Mapping):
        raise ResiliencyConfigError(plugin, field, flags, "a dict of ft_launcher flag names to values, or None")
    for name in flags:  # spelling and the refused flag first: no NVRx import is needed to say so
        _check_name(name, plugin=plugin, field=field)
    parser, why = nvrx_parser()
    if parser is None:
        raise ResiliencyConfigError(
            plugin, field, dict(flags), detail=f"{why}: the flags cannot be checked against NVRx's own parser"
        )
    options = _options(parser)
    words: list[str] = []
    for name, value in flags.items():
        words += _words_of(name, value, options, plugin=plugin, field=field, nvrx_config=nvrx_config or {})
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parser.parse_args([*words, "train.py"])
    except SystemExit:
        last = (stderr.getvalue().strip().splitlines() or ["rejected"])[-1]
        said = last.split(": error: ", 1)[-1]  # without argparse's program name (this process's argv[0])
        raise ResiliencyConfigError(
            plugin, field, dict(flags), detail=f"NVRx {nvrx_version()}'s ft_launcher parser says: {said}"
        ) from None
    return words


def _check_name(name: Any, *, plugin: str, field: str) -> None:
    if isinstance(name, str) and name.startswith("-"):
        raise ResiliencyConfigError(
            plugin,
            field,
            name,
            "a flag name without its leading dashes",
            detail=f"write {name.lstrip('-')!r}, not {name!r} (the plugin adds the '--')",
        )
    if not isinstance(name, str) or FLAG_NAME.fullmatch(name) is None:
        raise ResiliencyConfigError(plugin, field, name, "an ft_launcher flag name such as 'term-timeout'")
    if name.replace("_", "-") == EXCLUSION_DIR_FLAG:
        raise ResiliencyConfigError(plugin, field, name, "a flag other than --ft-scheduler-exclusion-dir",
                                    detail=EXCLUSION_WHY)  # fmt: skip


def _words_of(
    name: str, value: Any, options: dict[str, Any], *, plugin: str, field: str, nvrx_config: Mapping[str, Any]
) -> list[str]:
    option = "--" + name
    action = options.get(option)
    if action is None:
        close = difflib.get_close_matches(option, sorted(o for o in options if o.startswith("--")), n=1)
        raise ResiliencyConfigError(
            plugin,
            field,
            name,
            f"a flag of the installed NVRx {nvrx_version()}'s ft_launcher",
            detail=f"{option} is not one of its options" + (f"; did you mean {close[0][2:]!r}?" if close else ""),
        )
    owner = OWNED_DESTS.get(action.dest)
    if owner is not None:
        raise ResiliencyConfigError(
            plugin, field, name, "a flag nothing else writes", detail=f"{option} is set by {owner}: set it there"
        )
    key = action.dest.removeprefix("ft_")
    if action.dest.startswith("ft_") and key in nvrx_config:
        raise ResiliencyConfigError(
            plugin, field, name, "a flag not also given in nvrx_config",
            detail=f"nvrx_config[{key!r}] sets the same NVRx setting (the flag would override the file): keep one",
        )  # fmt: skip
    if action.nargs == 0:  # a switch (store_true, torch's check_env)
        if value is not True:
            raise ResiliencyConfigError(plugin, f"{field}[{name!r}]", value, f"True ({option} takes no value)")
        return [option]
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        raise ResiliencyConfigError(plugin, f"{field}[{name!r}]", value, "a string, a finite number or a bool")
    if FLAG_VALUE.fullmatch(text) is None:
        raise ResiliencyConfigError(
            plugin,
            f"{field}[{name!r}]",
            value,
            f"a value made of {FLAG_VALUE_TEXT}",
            detail="it is written into the job's launch line",
        )
    return [option, text]


def install(executor: Any, words: list[str], *, plugin: str, field: str, label: str) -> None:
    """Put ``words`` (from :func:`flag_words`) on ft_launcher's launch line: on Slurm, the sbatch block; refused on
    every other executor (``label`` names it), where NeMo-Run builds ft_launcher's arguments from the launcher's
    fields alone."""
    if not words:
        return
    import nemo_run as run

    if not isinstance(executor, run.SlurmExecutor):
        raise ResiliencyConfigError(
            plugin,
            field,
            " ".join(words),
            "None or {} off Slurm",
            detail=(
                f"NeMo-Run starts ft_launcher on {label} from an argument list built from run.FaultTolerance's "
                "fields only (no shell line and no hook adds a word to it); on run.SlurmExecutor the plugin adds "
                "the flags to the sbatch launch line. For settings of NVRx's config file use nvrx_config"
            ),
        )
    check_setup_lines(executor, plugin=plugin)
    line = f"{ARRAY_NAME}=({' '.join(words)})"
    existing = executor.setup_lines or ""
    if _SHIM_MARK in existing:
        if line not in existing:
            raise ResiliencyConfigError(
                plugin, field, " ".join(words), detail="the job's sbatch script already adds other ft_launcher flags"
            )
        return
    _add_chain_helpers(executor)
    executor.setup_lines = executor.setup_lines.rstrip("\n") + "\n" + line + "\n" + _SHIM
