"""Known Megatron Bridge 0.6.x bugs on the plugins' paths, detected from the installed code, not its version.

Four bugs reported by users and fixed upstream after Megatron Bridge 0.6 sit exactly where the plugins act.
Each is one small dataclass below: the upstream number, what breaks, which plugin set-up meets it, the
workaround, and what the plugin does about it (``warn`` or ``refuse``; the reason for each choice is in the
class docstring).

Detection reads the **code path** of the Megatron Bridge installed where the check runs: the Python file that
holds the buggy function is read as text (located with ``importlib.util.find_spec``, which does not execute
``megatron.bridge``'s ``__init__``) and parsed with :mod:`ast`; nothing of Megatron Bridge is imported. So a
patched 0.6.x or a backport passes, and a submit host without Megatron Bridge does not pay for (or fail on) an
import. Where the file cannot be read or no longer has the function the check looks at, the check falls back to
the installed distribution's version (``importlib.metadata``): a 0.6.x or older release is reported
``present``; anything else, or nothing installed, is ``unknown`` and the plugins do nothing.

Every check takes ``source=`` (the file's text) or ``path=``, so a contract test can point it at a copy of the
installed file with the upstream fix applied and see it flip to ``fixed``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from nemo_resiliency_plugins.errors import ResiliencyConfigError

logger = logging.getLogger(__name__)

Status = Literal["present", "fixed", "unknown"]
DISTRIBUTION = "megatron-bridge"
# The last release line without any of the three fixes (all merged upstream after 0.6.x was cut).
LAST_AFFECTED_RELEASE = (0, 6)


@dataclass(frozen=True)
class Detection:
    """What the check found and what it read to decide."""

    status: Status
    basis: str


@dataclass(frozen=True, kw_only=True)
class KnownBug:
    """One upstream bug. Subclasses say where it lives (``file`` / ``function``) and how the fix looks."""

    number: int
    title: str
    effect: str
    combination: str
    workaround: str
    action: Literal["warn", "refuse"]
    plugins: tuple[str, ...]
    file: str  # relative to the megatron/bridge package directory
    function: str  # what the check reads, for messages

    url_base: ClassVar[str] = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/"
    #: The upstream whose code the check reads: the import package (``file`` is relative to it), the
    #: distribution asked for a version when the file cannot be read, the last release line without the fix,
    #: and the names used in messages.
    package: ClassVar[str] = "megatron.bridge"
    distribution: ClassVar[str | None] = None  # None: the module's DISTRIBUTION (Megatron Bridge)
    last_affected: ClassVar[tuple[int, int]] = LAST_AFFECTED_RELEASE
    project: ClassVar[str] = "Megatron Bridge"
    repo_ref: ClassVar[str] = "Megatron-Bridge"

    @property
    def ref(self) -> str:
        return f"{self.repo_ref}#{self.number}"

    def _by_version(self, reason: str) -> Detection:
        return _by_version(reason, self.distribution or DISTRIBUTION, self.last_affected)

    # ------------------------------------------------------------------------------------------- detection

    def detect(self, source: str | None = None, *, path: str | Path | None = None) -> Detection:
        """``present`` / ``fixed`` / ``unknown`` for the installed Megatron Bridge, or for ``source`` / ``path``."""
        if path is not None:
            where = str(path)
        else:
            where = "the given source" if source is not None else f"{self.package.replace('.', '/')}/{self.file}"
        if source is None:
            path = installed_file(self.file, self.package) if path is None else path
            if path is None:
                return self._by_version(f"{self.project}'s source is not on this host")
            try:
                source = Path(path).read_text()
            except (OSError, UnicodeDecodeError) as err:
                return self._by_version(f"{where} cannot be read ({err})")
        try:
            tree = ast.parse(source)
        except SyntaxError as err:
            return self._by_version(f"{where} does not parse ({err.msg})")
        fixed = self.fixed_in(tree)
        if fixed is None:
            return self._by_version(f"{where} has no {self.function}")
        return Detection("fixed" if fixed else "present", f"{where}: {self.function}")

    def fixed_in(self, tree: ast.Module) -> bool | None:
        """True / False from the parsed file; None when the code the check reads is not there."""
        raise NotImplementedError

    def applies(self, task: Any) -> bool:
        """Does the task (after the plugins' set-up) run the code path the bug is on?"""
        raise NotImplementedError

    def avoided(self, task: Any) -> str | None:
        """Where the task combines the plugins but has taken the workaround: what it did (doctor says so)."""
        return None

    def message(self, detection: Detection) -> str:
        return (
            f"known {self.project} bug {self.ref} ({self.title}; {self.url_base}{self.number}) is {detection.status} "
            f"in the installed code ({detection.basis}): {self.effect}. Workaround: {self.workaround}"
        )


def _field(task: Any, section: str, field: str) -> Any:
    # Imported here: the checks themselves need neither NeMo-Run nor fiddle, only applies() does.
    from nemo_resiliency_plugins.core.task_config import read_config_field

    return read_config_field(task, section, field, plugin="known_bugs")


def _true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


@dataclass(frozen=True, kw_only=True)
class FinishedRunResumeFails(KnownBug):
    """#5711: a run resumed from a checkpoint already at ``train_iters`` fails at shutdown with computed timeouts.

    The path (0.6.2): ``pretrain`` -> zero training iterations -> ``_finish_train`` -> ``fault_tolerance.shutdown``
    -> ``_maybe_update_timeouts`` selects the ``setup`` section (a persistent checkpoint was loaded) while that
    section is still open (only the first train/eval step closes it) -> NVRx raises ``RankMonitorClientError: Not
    enough data to compute timeouts``. The fix closes an open ``setup`` section in ``shutdown`` first; the check
    looks for ``end_section("setup")`` or ``end_all_sections()`` in ``shutdown`` or a module function it calls.

    **Warn, not refuse.** ``calc_ft_timeouts=True`` is the drop-in default (Megatron Bridge's own plugin's too);
    refusing it would block every FT job on 0.6.x for an end-of-run case: a job resumed when its last checkpoint
    is already the final one (preempted or failed after the final save, a requeue of a run that had finished, a
    finished job submitted again). Nothing trained is lost - the final checkpoint is complete - but the job exits
    1 where the requeue guard expects 0, so every in-job restart and every requeue is spent re-failing on the same
    checkpoint and the job ends FAILED. The warning says so and how to avoid it. Only FaultTolerancePlugin warns
    (it switches the FT package on); PreemptionPlugin, which makes such a resume likelier, stays silent so the job
    gets one warning, and a task that enables ``ft`` by itself gets its line from ``doctor`` / ``explain``.
    """

    number: int = 5711
    title: str = "a finished run resumed with calc_ft_timeouts=True fails"
    effect: str = (
        "a job that resumes from a checkpoint already at train.train_iters (a requeue or in-job restart after the "
        "final save, e.g. with PreemptionPlugin or the Slurm requeue guard) runs zero iterations and then fails in "
        "fault_tolerance.shutdown with 'RankMonitorClientError: Not enough data to compute timeouts' instead of "
        "exiting 0; each restart and requeue fails the same way until they are spent and the job ends FAILED "
        "(the final checkpoint itself is complete)"
    )
    combination: str = "FaultTolerancePlugin(calc_ft_timeouts=True), worst with requeues (PreemptionPlugin, Slurm)"
    workaround: str = (
        "FaultTolerancePlugin(calc_ft_timeouts=False) (the plugin's explicit section_timeouts then apply), or a "
        "Megatron Bridge with the fix (fault_tolerance.shutdown closes an open 'setup' section); a job that ends "
        "FAILED this way with its last checkpoint at train_iters has in fact finished"
    )
    action: Literal["warn", "refuse"] = "warn"
    plugins: tuple[str, ...] = ("FaultTolerancePlugin",)
    file: str = "training/fault_tolerance.py"
    function: str = "shutdown()"

    def fixed_in(self, tree: ast.Module) -> bool | None:
        shutdown = _module_function(tree, "shutdown")
        if shutdown is None:
            return None
        bodies = [shutdown, *(_module_function(tree, name) for name in _called_names(shutdown))]
        return any(_closes_setup_section(body) for body in bodies if body is not None)

    def applies(self, task: Any) -> bool:
        return _true(_field(task, "ft", "enable_ft_package")) and _true(_field(task, "ft", "calc_ft_timeouts"))


@dataclass(frozen=True, kw_only=True)
class StragglerStopsAfterInprocessRestart(KnownBug):
    """#5761: NVRx straggler detection stops for good after the first in-process restart.

    The path (0.6.2): a failure -> NVRx ``Wrapper`` finalize -> ``GlobalState.reset_for_restart()`` drops the
    straggler manager without ``shutdown()``; NVRx keeps its detector initialised process-wide, so the retry's
    ``manager.initialize()`` fails, ``train.py`` catches that, logs it and trains on with the manager set to None:
    no straggler reports and no ``stop_if_detected`` for the rest of the job. The fix shuts the manager down in
    ``reset_for_restart``; the check looks there for a ``...shutdown...`` call on the straggler manager.

    **Refuse.** Both plugins are asked for, and after the first fault one of them silently does nothing for the
    rest of the job - the kind of silent no-op this package refuses. The refusal costs a configuration change,
    not a capability: keep both features with launcher restarts instead of in-process ones (FaultTolerancePlugin
    restarts start new processes, where the detector initialises again), or use a Megatron Bridge with the fix.
    """

    number: int = 5761
    title: str = "straggler detection stops after an in-process restart"
    effect: str = (
        "after the first in-process restart NVRx straggler detection is off for the rest of the job: "
        "GlobalState.reset_for_restart drops the detector without shutting it down, the retry cannot initialise "
        "it again, and Megatron Bridge trains on without straggler reports or stop_if_detected"
    )
    combination: str = "StragglerDetectionPlugin + InProcessRestartPlugin (or inprocess_restart.enabled on the task)"
    workaround: str = (
        "drop InProcessRestartPlugin and rely on FaultTolerancePlugin's launcher restarts (new processes initialise "
        "the detector again), or drop StragglerDetectionPlugin, or use a Megatron Bridge with the fix "
        "(GlobalState.reset_for_restart shuts the straggler manager down)"
    )
    action: Literal["warn", "refuse"] = "refuse"
    plugins: tuple[str, ...] = ("StragglerDetectionPlugin", "InProcessRestartPlugin")
    file: str = "training/state.py"
    function: str = "GlobalState.reset_for_restart()"

    def fixed_in(self, tree: ast.Module) -> bool | None:
        method = _method(tree, "GlobalState", "reset_for_restart")
        if method is None:
            return None
        for node in ast.walk(method):
            if isinstance(node, ast.Call) and "shutdown" in _call_name(node) and "straggler" in ast.unparse(node):
                return True
        return False

    def applies(self, task: Any) -> bool:
        return _true(_field(task, "nvrx_straggler", "enabled")) and _true(_field(task, "inprocess_restart", "enabled"))


@dataclass(frozen=True, kw_only=True)
class CallWrapperNotForwarded(KnownBug):
    """#5187: Megatron Bridge's in-process adapter never receives NVRx's ``CallWrapper``.

    The path (0.6.2): ``inprocess_restart()`` wraps ``_adapter(*args, **kwargs)`` in NVRx's ``Wrapper``. NVRx
    injects its ``CallWrapper`` only into a parameter annotated ``CallWrapper`` (``substitute_param_value``), and
    the adapter has none, so ``_pretrain`` always gets ``inprocess_call_wrapper=None``: each attempt builds its
    process groups on the un-prefixed coordination store instead of ``PrefixStore(<attempt>, store)``, and a
    failure runs Megatron Bridge's ordinary failure clean-up (destroy global state, abort process groups) on top
    of NVRx's abort. The fix annotates the adapter's parameter; the check looks for a parameter annotated with
    ``CallWrapper`` on the function passed to ``Wrapper(...)``.

    **Warn, not refuse.** In-process restart is still driven by NVRx on 0.6.x, and a restart that cannot
    re-rendezvous ends at NVRx's ``hard_timeout`` where FaultTolerancePlugin's launcher restart takes over; the
    cost is a slower or failed in-process recovery, not a wrong result. Refusing would make the plugin unusable
    on every 0.6.x install. (The reference workload builds the per-attempt store itself, so rehearsals on this
    package's workload do not show the bug.)
    """

    number: int = 5187
    title: str = "the in-process restart adapter gets no NVRx CallWrapper"
    effect: str = (
        "Megatron Bridge's _pretrain always gets inprocess_call_wrapper=None, so the per-attempt store "
        "(PrefixStore(<attempt>, store)) is never used: a restarted attempt re-initialises its process groups on "
        "the store keys the earlier attempt left, and a failure runs Megatron Bridge's ordinary distributed "
        "clean-up on top of NVRx's abort; an in-process restart can then fail to re-rendezvous and wait out "
        "hard_timeout before the launcher restart (FaultTolerancePlugin) takes over"
    )
    combination: str = "InProcessRestartPlugin (Megatron Bridge's pretrain)"
    workaround: str = (
        "add FaultTolerancePlugin so a failed in-process restart still ends in a launcher restart, keep "
        "hard_timeout short, or use a Megatron Bridge with the fix (the adapter declares "
        "inprocess_call_wrapper: Optional[CallWrapper])"
    )
    action: Literal["warn", "refuse"] = "warn"
    plugins: tuple[str, ...] = ("InProcessRestartPlugin",)
    file: str = "training/inprocess_restart.py"
    function: str = "inprocess_restart(): the adapter given to inprocess.Wrapper"

    def fixed_in(self, tree: ast.Module) -> bool | None:
        outer = _module_function(tree, "inprocess_restart")
        if outer is None:
            return None
        nested = {n.name: n for n in ast.walk(outer) if isinstance(n, ast.FunctionDef) and n is not outer}
        for node in ast.walk(outer):
            # Wrapper(...)(fn): a call whose callee is itself a call of something named Wrapper.
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Call)
                and _call_name(node.func).endswith("Wrapper")
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in nested
            ):
                wrapped = nested[node.args[0].id].args
                params = [*wrapped.posonlyargs, *wrapped.args, *wrapped.kwonlyargs]
                return any(p.annotation is not None and "CallWrapper" in ast.unparse(p.annotation) for p in params)
        return None

    def applies(self, task: Any) -> bool:
        return _true(_field(task, "inprocess_restart", "enabled"))


@dataclass(frozen=True, kw_only=True)
class LocalSaveSkipsExitSave(KnownBug):
    """#5922: a planned exit at a step with a non-persistent (local) save writes no persistent checkpoint.

    The path (0.6.2, ``training/train.py``, ``checkpoint_and_decide_exit``): the non-persistent save branch sets
    the same ``saved_checkpoint`` flag as the persistent one, and the three planned exits that follow
    (``exit_duration_in_mins``, ``exit_interval``, the NVRx straggler stop) save only ``if not saved_checkpoint``.
    When one of them fires at a step where only a local save happened, the job exits 0 with its newest state on
    the nodes' local disks alone. A requeue onto other nodes (the straggler stop's requeue excludes the slow node
    by design) cannot read those and resumes from the previous persistent checkpoint: up to ``save_interval``
    steps trained again. The signal exit saves unconditionally and is not affected. The fix keeps a separate flag
    for the persistent save; the check reads whether a name the non-persistent branch sets to True is one an exit
    branch tests with ``not``.

    **Warn, not refuse.** The loss is bounded (at most one persistent interval, and only when the exit lands on a
    local-only save step), the combination is a legitimate one, and ``exit_interval`` can avoid it entirely by
    being a multiple of ``save_interval`` (the persistent branch runs first there). The warning names the cost.
    """

    number: int = 5922
    title: str = "an exit at a local-save step skips the persistent save"
    effect: str = (
        "train.exit_duration_in_mins, train.exit_interval and the NVRx straggler stop skip their persistent save "
        "when a non-persistent (local) save happened at the same step; the job exits with its newest state only "
        "on the nodes' local disks, and a requeue onto other nodes (a straggler stop excludes the slow node) "
        "resumes from the previous persistent checkpoint, training up to checkpoint.save_interval steps again"
    )
    combination: str = (
        "LocalCheckpointPlugin (non_persistent_save_interval) + train.exit_interval, train.exit_duration_in_mins or "
        "StragglerDetectionPlugin(stop_if_detected=True)"
    )
    workaround: str = (
        "make train.exit_interval a multiple of checkpoint.save_interval (the persistent save runs first at such "
        "a step); for exit_duration_in_mins and the straggler stop, keep checkpoint.save_interval short enough "
        "that redoing it is acceptable, or use a Megatron Bridge with the fix (checkpoint_and_decide_exit tracks "
        "the persistent save apart from the non-persistent one)"
    )
    action: Literal["warn", "refuse"] = "warn"
    plugins: tuple[str, ...] = ("LocalCheckpointPlugin", "StragglerDetectionPlugin")
    file: str = "training/train.py"
    function: str = "checkpoint_and_decide_exit(): the flag the exits test after a non-persistent save"

    def fixed_in(self, tree: ast.Module) -> bool | None:
        fn = _module_function(tree, "checkpoint_and_decide_exit")
        if fn is None:
            return None
        set_by_local: set[str] = set()
        found_branch = False
        for node in ast.walk(fn):
            if isinstance(node, ast.If) and "non_persistent_save_interval" in ast.unparse(node.test):
                found_branch = True
                for stmt in node.body:
                    sets_true = isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
                    if sets_true and stmt.value.value is True:
                        set_by_local |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        if not found_branch:
            return None
        tested_by_exits = {
            node.operand.id
            for node in ast.walk(fn)
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and isinstance(node.operand, ast.Name)
        }
        return not (set_by_local & tested_by_exits)

    def applies(self, task: Any) -> bool:
        interval = _field(task, "checkpoint", "non_persistent_save_interval")
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            return False
        planned_exit = bool(_field(task, "train", "exit_interval")) or bool(
            _field(task, "train", "exit_duration_in_mins")
        )
        straggler_stop = _true(_field(task, "nvrx_straggler", "enabled")) and _true(
            _field(task, "nvrx_straggler", "stop_if_detected")
        )
        return planned_exit or straggler_stop


@dataclass(frozen=True, kw_only=True)
class InprocessAbortKeepsNvrxResultsQueue(KnownBug):
    """#5842: an in-process restart leaves NVRx's async-save results queue behind for the next save.

    The path (0.6.2, ``training/inprocess_restart.py``): NVRx's ``Wrapper`` aborts a failed attempt through the
    ``AbortCheckpoint`` step of its ``abort`` chain, which closes the async calls queue and resets Megatron
    Core's module-global ``filesystem_async._results_queue``. With ``checkpoint.async_strategy="nvrx"`` (the
    default) the writer reports into NVRx's own module-global queue
    (``nvidia_resiliency_ext/checkpointing/async_ckpt/filesystem_async.py``), which nothing resets: the retry's
    first async save can read the aborted save's result and fail, or finalise with the wrong save's metadata.
    The fix resets NVRx's queue in the abort path too; the check looks in ``AbortCheckpoint`` for a reference to
    NVRx's ``filesystem_async`` module (an import from ``nvidia_resiliency_ext``) next to ``_results_queue``.

    **Refuse.** The failure is a wrong or failed checkpoint after a recovery that looked successful - the silent
    kind this package refuses - and it sits on the two plugins' defaults. The refusal keeps both features:
    ``AsyncCheckpointPlugin(async_strategy="mcore")`` uses Megatron Core's queue, which 0.6.2's abort resets.
    """

    number: int = 5842
    title: str = "in-process restart + NVRx async save reuse a stale results queue"
    effect: str = (
        "after an in-process restart the next asynchronous save can pick up the aborted save's result from NVRx's "
        "results queue (Megatron Bridge's AbortCheckpoint resets only Megatron Core's queue): the save fails, or "
        "it is finalised with the metadata of the wrong save"
    )
    combination: str = "InProcessRestartPlugin + AsyncCheckpointPlugin(async_strategy='nvrx', the default)"
    workaround: str = (
        "AsyncCheckpointPlugin(async_strategy='mcore') (Megatron Core's queue, which the abort resets; with "
        "ckpt_format='torch_dist'), or drop one of the two plugins, or use a Megatron Bridge with the fix "
        "(the in-process abort also resets NVRx's filesystem_async._results_queue)"
    )
    action: Literal["warn", "refuse"] = "refuse"
    plugins: tuple[str, ...] = ("InProcessRestartPlugin", "AsyncCheckpointPlugin")
    file: str = "training/inprocess_restart.py"
    function: str = "inprocess_restart(): AbortCheckpoint.__call__"

    def fixed_in(self, tree: ast.Module) -> bool | None:
        outer = _module_function(tree, "inprocess_restart")
        if outer is None:
            return None
        abort = next((n for n in ast.walk(outer) if isinstance(n, ast.ClassDef) and n.name == "AbortCheckpoint"), None)
        if abort is None:
            return None
        text = ast.unparse(abort)
        for node in ast.walk(abort):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = [a.name for a in node.names] if isinstance(node, ast.Import | ast.ImportFrom) else []
            nvrx = [m for m in [module or "", *names] if m.startswith("nvidia_resiliency_ext") and "async_ckpt" in m]
            if nvrx and "_results_queue" in text:
                return True
        return False

    def applies(self, task: Any) -> bool:
        return _true(_field(task, "inprocess_restart", "enabled")) and _true(_field(task, "checkpoint", "async_save"))

    def avoided(self, task: Any) -> str | None:
        strategy = _field(task, "checkpoint", "async_strategy")
        if isinstance(strategy, str) and strategy.strip().lower() == "mcore":
            return (
                "checkpoint.async_strategy='mcore': the writer reports into Megatron Core's queue, which the abort "
                "resets"
            )
        return None


@dataclass(frozen=True, kw_only=True)
class ReplicasOfMxfp8WeightsHoldNans(KnownBug):
    """NVRx #349 (open, no fix published): local-checkpoint replication writes NaNs into replica copies of
    Transformer Engine MXFP8 weights.

    The path (NVRx 0.7.0, ``checkpointing/local/replication/strategies.py``): ``CliqueReplicationStrategy.replicate``
    exchanges each rank's tensors with its replication group as plain tensors; TE's quantized (MXFP8) weight
    tensors are not treated apart, and the reporter found NaNs in 4,668 of 32,796 tensors, every one in a replica
    file, none in a primary. The files are byte-valid, so this package's CRC guard cannot see it; a node lost
    before the next persistent save is restored from a replica and training goes NaN. No fix is public, so the
    check reads ``replicate`` for any handling of quantized tensors (a name with ``fp8``, ``quantiz`` or
    ``mxfp``): none there is ``present``; such handling is counted as a fix (to be confirmed against the real fix
    when it lands).

    **Refuse.** A replica that restores NaNs is silent corruption of the state the job resumes from. The
    refusal costs replication only: ``LocalCheckpointPlugin(replication=False)`` keeps local saves (a lost node
    then resumes from the persistent checkpoint), or a recipe without MXFP8 keeps replication.
    """

    number: int = 349
    title: str = "local-checkpoint replicas of MXFP8 weights hold NaNs"
    effect: str = (
        "NVRx's local-checkpoint replication writes NaN values into the replica copies of Transformer Engine "
        "MXFP8 weights (primaries are intact; the files are byte-valid, so no CRC check sees it): a node lost "
        "before the next persistent save is restored from a corrupt replica and training goes NaN"
    )
    combination: str = "LocalCheckpointPlugin(replication=True) + an MXFP8 recipe (model.fp8_recipe='mxfp8')"
    workaround: str = (
        "LocalCheckpointPlugin(replication=False) (a lost node resumes from the persistent checkpoint), or a "
        "precision recipe without MXFP8, or an NVRx with the fix (none published yet)"
    )
    action: Literal["warn", "refuse"] = "refuse"
    plugins: tuple[str, ...] = ("LocalCheckpointPlugin",)
    file: str = "checkpointing/local/replication/strategies.py"
    function: str = "CliqueReplicationStrategy.replicate(): handling of quantized (MXFP8) tensors"

    url_base: ClassVar[str] = "https://github.com/NVIDIA/nvidia-resiliency-ext/issues/"
    package: ClassVar[str] = "nvidia_resiliency_ext"
    distribution: ClassVar[str | None] = "nvidia-resiliency-ext"
    last_affected: ClassVar[tuple[int, int]] = (0, 7)
    project: ClassVar[str] = "NVRx"
    repo_ref: ClassVar[str] = "nvidia-resiliency-ext"

    def fixed_in(self, tree: ast.Module) -> bool | None:
        method = _method(tree, "CliqueReplicationStrategy", "replicate")
        if method is None:
            return None
        return re.search(r"fp8|quantiz|mxfp", ast.unparse(method), re.IGNORECASE) is not None

    def applies(self, task: Any) -> bool:
        if not _true(_field(task, "checkpoint", "replication")):
            return False
        return _uses_mxfp8(task)


def _uses_mxfp8(task: Any) -> bool:
    """An MXFP8 recipe visible on the task: ``model.fp8_recipe=mxfp8`` or a ``mixed_precision`` recipe name with
    ``mxfp8`` (``run.Script`` overrides; a ``run.Partial``'s model config through its ``model`` argument)."""
    import nemo_run as run

    from nemo_resiliency_plugins.core.task_config import script_overrides

    if isinstance(task, run.Script):
        for override in script_overrides(task, plugin="known_bugs"):
            if override.key in ("model.fp8_recipe", "mixed_precision") and "mxfp8" in str(override.value).lower():
                return True
        return False
    return "mxfp8" in str(task).lower()


KNOWN_BUGS: tuple[KnownBug, ...] = (
    FinishedRunResumeFails(),
    StragglerStopsAfterInprocessRestart(),
    CallWrapperNotForwarded(),
    LocalSaveSkipsExitSave(),
    InprocessAbortKeepsNvrxResultsQueue(),
    ReplicasOfMxfp8WeightsHoldNans(),
)


# ------------------------------------------------------------------------------------------------- acting


def guard_known_bugs(task: Any, *, plugin: str) -> None:
    """Called at the end of an affected plugin's ``setup()``: refuse or warn for each known bug on its path.

    A bug acts only through the plugins it names (so one warning per job, not one per plugin), only when the
    task (after set-up) runs its code path, and only when the installed Megatron Bridge is found to have it;
    ``unknown`` (e.g. a submit host without Megatron Bridge) does nothing here - ``doctor`` and ``explain`` show it.
    """
    for bug in KNOWN_BUGS:
        if plugin not in bug.plugins or not bug.applies(task) or bug.avoided(task):
            continue
        detection = bug.detect()
        if detection.status != "present":
            logger.debug("%s: %s %s (%s)", plugin, bug.ref, detection.status, detection.basis)
            continue
        if bug.action == "refuse":
            raise ResiliencyConfigError(plugin, None, detail=bug.message(detection))
        logger.warning("%s: %s", plugin, bug.message(detection))


@dataclass(frozen=True)
class Finding:
    """A known bug that applies to a job, for ``doctor`` / ``explain``."""

    bug: KnownBug
    detection: Detection
    avoided: str | None = None

    @property
    def verdict(self) -> str:
        """doctor's verdict: a present bug FAILs where the plugins refuse it, warns where they warn."""
        if self.detection.status == "fixed" or self.avoided:
            return "pass"
        if self.detection.status == "unknown":
            return "n/a"
        return "FAIL" if self.bug.action == "refuse" else "warn"

    @property
    def line(self) -> str:
        if self.avoided and self.detection.status != "fixed":
            where = f"{self.detection.status} in {self.detection.basis}"
            return f"{self.bug.ref} ({self.bug.title}) is {where}; avoided: {self.avoided}"
        if self.detection.status == "fixed":
            return f"{self.bug.ref} ({self.bug.title}): fixed in the installed code ({self.detection.basis})"
        if self.detection.status == "unknown":
            return f"{self.bug.ref} ({self.bug.title}): cannot tell here ({self.detection.basis})"
        what = "refuses the job" if self.bug.action == "refuse" else "warns at set-up"
        return (
            f"{self.bug.ref} ({self.bug.title}) is present in {self.detection.basis}; the plugin {what}. "
            f"Workaround: {self.bug.workaround}"
        )


def uses_inprocess_restart(task: Any) -> bool:
    """The task (after set-up) runs NVRx in-process restart (``inprocess_restart.enabled``)."""
    return _true(_field(task, "inprocess_restart", "enabled"))


def findings(task: Any) -> list[Finding]:
    """Every known bug whose code path the task runs, with what the installed Megatron Bridge says about it."""
    return [Finding(bug, bug.detect(), bug.avoided(task)) for bug in KNOWN_BUGS if bug.applies(task)]


# ------------------------------------------------------------------------------------------------ helpers


def installed_file(relative: str, package: str = "megatron.bridge") -> Path | None:
    """``<package>/<relative>`` of the installed package (Megatron Bridge unless named), without importing it;
    None if absent."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(root) / relative
        if candidate.is_file():
            return candidate
    return None


def installed_version(distribution: str | None = None) -> str | None:
    try:
        return importlib.metadata.version(distribution or DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def _by_version(
    reason: str, distribution: str | None = None, last_affected: tuple[int, int] = LAST_AFFECTED_RELEASE
) -> Detection:
    distribution = distribution or DISTRIBUTION
    version = installed_version(distribution)
    if version is None:
        return Detection("unknown", f"{reason}; {distribution} is not installed")
    match = re.match(r"(\d+)\.(\d+)", version)
    if match and (int(match[1]), int(match[2])) <= last_affected:
        return Detection("present", f"{reason}; {distribution} {version} predates the fix")
    return Detection("unknown", f"{reason}; {distribution} {version}")


def _module_function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    return None


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _called_names(fn: ast.FunctionDef) -> list[str]:
    return [n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


def _closes_setup_section(fn: ast.FunctionDef) -> bool:
    """``end_section("setup")`` (positional or keyword) or NVRx's ``end_all_sections()`` somewhere in ``fn``."""
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        if _call_name(node) == "end_all_sections":
            return True
        if _call_name(node) == "end_section":
            values = [*node.args, *(k.value for k in node.keywords)]
            if any(isinstance(v, ast.Constant) and v.value == "setup" for v in values):
                return True
    return False
