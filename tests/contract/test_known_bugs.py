"""The known-bug checks pinned against the installed Megatron Bridge source (0.6.2 here).

For each bug: the check reads the installed file and says ``present``; on a copy of that file with the
upstream fix applied (written to ``tmp_path``) it says ``fixed``. Each fix is applied as a text edit of the
installed file that must match exactly, so a Megatron Bridge whose code moved fails here instead of the check
silently reading the wrong thing. Two verdicts are also checked against behaviour: #5187 with NVRx's own parameter
injection on the adapter compiled from each file, #5761 with a retry of NVRx's real detector after each file's
``reset_for_restart`` (slow: a fresh interpreter). #5711's behaviour is checked end to end in
tests/smoke/test_fault_tolerance_local.py.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from nemo_resiliency_plugins.core import known_bugs
from nemo_resiliency_plugins.core.known_bugs import (
    KNOWN_BUGS,
    CallWrapperNotForwarded,
    FinishedRunResumeFails,
    InprocessAbortKeepsNvrxResultsQueue,
    LocalSaveSkipsExitSave,
    ReplicasOfMxfp8WeightsHoldNans,
    StragglerStopsAfterInprocessRestart,
)

pytestmark = pytest.mark.contract

# Megatron-Bridge#5711's fix: shutdown() closes a still-open "setup" section before the final timeout update.
FIX_5711 = (
    '        print_rank_0("FT: closing...")\n        _maybe_update_timeouts(global_state, is_closing_ft=True)\n',
    '        print_rank_0("FT: closing...")\n'
    "        ft_state = global_state.fault_tolerance_state\n"
    "        if ft_state.is_setup_section_open:\n"
    '            rmon_cli.end_section("setup")\n'
    "            ft_state.is_setup_section_open = False\n"
    "        _maybe_update_timeouts(global_state, is_closing_ft=True)\n",
)
# Megatron-Bridge#5761's fix: reset_for_restart() shuts the straggler manager down before dropping it.
FIX_5761 = (
    "        self._straggler_timer = None\n        self._nvrx_straggler_manager = None\n",
    "        self._straggler_timer = None\n"
    "        from megatron.bridge.training.nvrx_straggler import safe_shutdown_nvrx_straggler_manager\n\n"
    "        safe_shutdown_nvrx_straggler_manager(self._nvrx_straggler_manager)\n"
    "        self._nvrx_straggler_manager = None\n",
)
# Megatron-Bridge#5187's fix: the adapter declares the annotated parameter NVRx injects its CallWrapper into.
FIX_5187 = (
    "    def _adapter(*args, **kwargs):\n"
    "        # Extract the injected CallWrapper from kwargs if NVRx placed it there\n"
    '        call_wrapper = kwargs.pop("inprocess_call_wrapper", None)\n',
    "    def _adapter(*args, inprocess_call_wrapper: Optional[inprocess.CallWrapper] = None, **kwargs):\n"
    "        call_wrapper = inprocess_call_wrapper\n",
)
# Megatron-Bridge#5922's fix: a non-persistent save no longer counts as the save the planned exits would write.
_LOCAL_SAVE_END = (
    "            non_persistent_ckpt=True,\n"
    "            train_data_iterator=train_data_iterator,\n"
    "            pg_collection=pg_collection,\n"
    "            callback_manager=callback_manager,\n"
    "            module_name=module_name,\n"
    "        )\n"
)
FIX_5922 = (_LOCAL_SAVE_END + "        saved_checkpoint = True\n", _LOCAL_SAVE_END)
FIXES = {5711: FIX_5711, 5761: FIX_5761, 5187: FIX_5187, 5922: FIX_5922}
ALL = [5711, 5761, 5187, 5922]


def _bug(number: int):
    return next(b for b in KNOWN_BUGS if b.number == number)


def _patched_copy(bug, tmp_path: Path) -> Path:
    installed = known_bugs.installed_file(bug.file)
    assert installed is not None, f"megatron/bridge/{bug.file} not found"
    old, new = FIXES[bug.number]
    text = installed.read_text()
    assert text.count(old) == 1, f"the code {bug.ref} is about moved in {installed}; update the check and this test"
    copy = tmp_path / Path(bug.file).name
    copy.write_text(text.replace(old, new))
    return copy


def test_one_check_per_bug_with_its_upstream_number():
    assert [(type(b), b.number) for b in KNOWN_BUGS] == [
        (FinishedRunResumeFails, 5711),
        (StragglerStopsAfterInprocessRestart, 5761),
        (CallWrapperNotForwarded, 5187),
        (LocalSaveSkipsExitSave, 5922),
        (InprocessAbortKeepsNvrxResultsQueue, 5842),
        (ReplicasOfMxfp8WeightsHoldNans, 349),
    ]


@pytest.mark.parametrize("number", ALL)
def test_installed_megatron_bridge_has_the_bug(number):
    bug = _bug(number)
    detection = bug.detect()
    assert detection.status == "present", detection
    # Decided from the code path, not from the version number.
    assert detection.basis == f"megatron/bridge/{bug.file}: {bug.function}"


@pytest.mark.parametrize("number", ALL)
def test_the_check_flips_to_fixed_on_the_source_with_the_fix(number, tmp_path):
    bug = _bug(number)
    patched = _patched_copy(bug, tmp_path)
    assert bug.detect(path=patched) == known_bugs.Detection("fixed", f"{patched}: {bug.function}")
    assert bug.detect(source=patched.read_text()).status == "fixed"
    # The unpatched text, given the same way, is still "present": the edit is what flips it.
    assert bug.detect(source=known_bugs.installed_file(bug.file).read_text()).status == "present"


@pytest.mark.parametrize("number", ALL)
def test_unreadable_code_falls_back_to_the_installed_version(number, tmp_path, monkeypatch):
    bug = _bug(number)
    # A file without the function the check reads (a refactored Megatron Bridge): decided by the version.
    detection = bug.detect(source="x = 1\n")
    assert detection.status == "present"
    assert "megatron-bridge 0.6.2 predates the fix" in detection.basis
    missing = bug.detect(path=tmp_path / "absent.py")
    assert missing.status == "present" and "cannot be read" in missing.basis
    # With no distribution to ask either, the check says it cannot tell.
    monkeypatch.setattr(known_bugs, "DISTRIBUTION", "megatron-bridge-not-installed")
    assert bug.detect(source="x = 1\n").status == "unknown"


@pytest.mark.parametrize(
    ("old", "added"),
    [
        # in a module function shutdown() calls, with a keyword argument
        (
            "    if not ft_state.is_calculating_timeouts:\n        return\n",
            '    if ft_state.is_setup_section_open:\n        rmon_cli.end_section(section="setup")\n',
        ),
        # NVRx's end_all_sections() in shutdown() itself
        ('        print_rank_0("FT: closing...")\n', "        rmon_cli.end_all_sections()\n"),
    ],
    ids=["helper-keyword", "end-all-sections"],
)
def test_5711_other_shapes_of_the_fix_count(old, added):
    bug = _bug(5711)
    text = known_bugs.installed_file(bug.file).read_text()
    assert text.count(old) == 1
    assert bug.detect(source=text.replace(old, old + added)).status == "fixed"


def _adapter_from(source: str):
    """The adapter Megatron Bridge hands to NVRx's Wrapper, compiled on its own from ``source``."""
    outer = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "inprocess_restart")
    adapter = next(n for n in ast.walk(outer) if isinstance(n, ast.FunctionDef) and n.name == "_adapter")
    import nvidia_resiliency_ext.inprocess as inprocess

    received = {}

    def train_fn(*args, **kwargs):
        received.update(kwargs)

    namespace = {"train_fn": train_fn, "inprocess": inprocess, "Optional": typing.Optional}
    exec(compile(ast.Module(body=[adapter], type_ignores=[]), "<adapter>", "exec", dont_inherit=True), namespace)
    return namespace["_adapter"], received


@pytest.mark.parametrize("fixed", [False, True])
def test_5187_verdict_agrees_with_nvrx_injection(fixed, tmp_path):
    """NVRx's own parameter substitution reaches _pretrain exactly when the check says 'fixed'."""
    from nvidia_resiliency_ext.inprocess import CallWrapper
    from nvidia_resiliency_ext.inprocess.param_utils import substitute_param_value

    bug = _bug(5187)
    path = _patched_copy(bug, tmp_path) if fixed else known_bugs.installed_file(bug.file)
    source = path.read_text()
    adapter, received = _adapter_from(source)
    call_wrapper = object()
    args, kwargs = substitute_param_value(adapter, ("state",), {"store": "store"}, {CallWrapper: call_wrapper})
    adapter(*args, **kwargs)
    assert (received["inprocess_call_wrapper"] is call_wrapper) is fixed
    assert bug.detect(source=source).status == ("fixed" if fixed else "present")


def test_checks_never_import_megatron_bridge():
    """Plugins run on submit hosts: reading the code must not import (or need) Megatron Bridge, nor NeMo-Run."""
    code = (
        "import sys\n"
        "from nemo_resiliency_plugins.core import known_bugs\n"
        "print([b.detect().status for b in known_bugs.KNOWN_BUGS])\n"
        "assert not [m for m in sys.modules if m.startswith(('megatron.bridge', 'nemo_run', 'torch', 'nvidia_'))]\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(["present"] * 6)


# Run in a fresh interpreter: a process group and NVRx's process-global detector, as one training rank has them.
_5761_PROBE = """
import importlib.util, os, sys, tempfile
from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable
ensure_megatron_bridge_importable()
import torch.distributed as dist
from megatron.bridge.training.config import NVRxStragglerDetectionConfig
from megatron.bridge.training.nvrx_straggler import NVRxStragglerDetectionManager, safe_shutdown_nvrx_straggler_manager
from nemo_resiliency_plugins.testing import cpu_accommodations as cpu

dist.init_process_group("gloo", init_method="file://" + os.path.join(tempfile.mkdtemp(), "pg"), rank=0, world_size=1)
for label, path in zip(("patched", "installed"), sys.argv[1:]):
    spec = importlib.util.spec_from_file_location(f"state_{label}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    state = module.GlobalState()
    results = []
    for attempt in range(2):  # the first attempt, then the retry after the in-process restart's clean-up
        state._nvrx_straggler_manager = NVRxStragglerDetectionManager(NVRxStragglerDetectionConfig(enabled=True))
        state._nvrx_straggler_created = True
        try:
            with cpu.cupti_stand_in():  # CPU accommodation: NVRx's CUPTI timing cannot load without a GPU
                state._nvrx_straggler_manager.initialize()
            results.append("initialised")
        except Exception as err:  # Megatron Bridge's train() catches this and trains on without detection
            results.append(type(err).__name__)
        if attempt == 0:
            state.reset_for_restart()
    print(label, *results)
    safe_shutdown_nvrx_straggler_manager(state._nvrx_straggler_manager)  # a clean detector for the next file
"""


@pytest.mark.slow
def test_5761_verdict_agrees_with_a_retry_of_the_real_detector(tmp_path):
    """With the installed reset_for_restart the retry cannot initialise NVRx's detector again (what Megatron Bridge's
    train() then silently trains on without); with the fixed copy it can. Each file's check says the same."""
    bug = _bug(5761)
    patched = _patched_copy(bug, tmp_path)
    installed = known_bugs.installed_file(bug.file)
    out = subprocess.run(
        [sys.executable, "-c", _5761_PROBE, str(patched), str(installed)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith(("patched", "installed"))]
    assert lines == ["patched initialised initialised", "installed initialised AssertionError"], out.stdout
    assert (bug.detect(path=patched).status, bug.detect(path=installed).status) == ("fixed", "present")


def test_5922_a_separate_persistent_flag_counts_as_the_fix():
    """Another shape of the fix: the local branch still sets its flag, the exits test a persistent-only one."""
    bug = _bug(5922)
    text = known_bugs.installed_file(bug.file).read_text()
    fn = ast.get_source_segment(text, known_bugs._module_function(ast.parse(text), "checkpoint_and_decide_exit"))
    persistent_set = "        saved_checkpoint = True\n\n    elif ("
    assert fn.count(persistent_set) == 1 and fn.count("not saved_checkpoint") == 3
    fixed = fn.replace(persistent_set, "        saved_checkpoint = saved_persistent = True\n\n    elif (").replace(
        "not saved_checkpoint", "not saved_persistent"
    )
    fixed = fixed.replace("    saved_checkpoint = False\n", "    saved_checkpoint = saved_persistent = False\n", 1)
    assert bug.detect(source=text.replace(fn, fixed)).status == "fixed"


def _exit_saves(source: str) -> list[bool]:
    """Run Megatron Bridge's ``checkpoint_and_decide_exit`` compiled from ``source`` for a step where a local save
    is due and ``exit_interval`` fires: the ``non_persistent_ckpt`` flag of each save it makes, in order."""
    from types import SimpleNamespace

    fn = next(
        n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "checkpoint_and_decide_exit"
    )
    for a in [*fn.args.args, *fn.args.kwonlyargs]:  # annotations name types the namespace lacks
        a.annotation = None
    fn.returns = None
    saves: list[bool] = []
    namespace = {
        "save_checkpoint_and_time": lambda *a, non_persistent_ckpt=False, **k: saves.append(non_persistent_ckpt),
        "barrier_and_log": lambda *a, **k: None,
        "end_active_mlflow_run": lambda *a, **k: None,
        "check_nvrx_straggler_detection": lambda manager: False,
    }
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "<train>", "exec", dont_inherit=True), namespace)
    cfg = SimpleNamespace(
        train=SimpleNamespace(exit_signal_handler=False, exit_duration_in_mins=None, exit_interval=10),
        checkpoint=SimpleNamespace(save="/ckpt", save_interval=100, non_persistent_save_interval=5),
    )
    state = SimpleNamespace(cfg=cfg, train_state=SimpleNamespace(step=10), nvrx_straggler_manager=None)
    assert namespace["checkpoint_and_decide_exit"](state, None, None, None, 0.0, None, None) is True
    return saves


@pytest.mark.parametrize("fixed", [False, True])
def test_5922_verdict_agrees_with_the_saves_the_exit_makes(fixed, tmp_path):
    """The installed function, run at an exit_interval step that is also a local-save step, makes only the local
    save; with the fix it also makes the persistent one the requeue onto other nodes needs."""
    bug = _bug(5922)
    path = _patched_copy(bug, tmp_path) if fixed else known_bugs.installed_file(bug.file)
    source = path.read_text()
    assert _exit_saves(source) == ([True, False] if fixed else [True])
    assert bug.detect(source=source).status == ("fixed" if fixed else "present")


# ------------------------------------------------------------- Megatron-Bridge#5842 and nvidia-resiliency-ext#349

# Megatron-Bridge#5842's fix (merged 2026-08-27, after 0.6.2): the in-process abort also resets NVRx's own
# module-global results queue. The stored upstream snapshots (Megatron-Bridge HEAD 067f987, 2026-08-22) predate the
# merge, so the fixed file could not be fetched here; this edit of the installed file has the fix's shape as the
# PR describes it (reset NVRx's filesystem_async._results_queue next to Megatron Core's).
FIX_5842 = (
    "            except Exception:\n                pass\n\n            return frozen_state\n",
    "                from nvidia_resiliency_ext.checkpointing.async_ckpt import filesystem_async as nvrx_fs\n\n"
    "                if nvrx_fs._results_queue is not None:\n"
    "                    try:\n"
    "                        nvrx_fs._results_queue._manager.shutdown()\n"
    "                    finally:\n"
    "                        nvrx_fs._results_queue = None\n\n"
    "            except Exception:\n                pass\n\n            return frozen_state\n",
)


def test_5842_present_in_the_installed_abort_and_fixed_when_it_resets_nvrxs_queue(tmp_path):
    bug = _bug(5842)
    installed = known_bugs.installed_file(bug.file)
    text = installed.read_text()
    # The installed abort resets Megatron Core's queue only: the premise of the bug, read from the code.
    assert "from megatron.core.dist_checkpointing.strategies import filesystem_async" in text
    assert "nvidia_resiliency_ext" not in text.split("class AbortCheckpoint")[1].split("abort = inprocess")[0]
    assert bug.detect().status == "present"
    old, new = FIX_5842
    assert text.count(old) == 1, "the abort path moved in the installed Megatron Bridge; update the check and this test"
    assert bug.detect(source=text.replace(old, new)).status == "fixed"
    # NVRx 0.7.0 does keep a module-global queue of its own: the one the installed abort leaves alone.
    nvrx_fs = known_bugs.installed_file("checkpointing/async_ckpt/filesystem_async.py", "nvidia_resiliency_ext")
    assert nvrx_fs is not None and "\n_results_queue = None\n" in nvrx_fs.read_text()


def test_349_present_in_the_installed_nvrx_replication_and_decided_from_its_code():
    bug = _bug(349)
    detection = bug.detect()
    assert detection.status == "present", detection
    assert detection.basis == f"nvidia_resiliency_ext/{bug.file}: {bug.function}"
    # No fix is public (the issue is open): the check is proven on the installed NVRx 0.7.0 only. Without the
    # method it reads, it falls back to NVRx's version (0.7.x predates any fix).
    fallback = bug.detect(source="x = 1\n")
    assert fallback.status == "present" and "nvidia-resiliency-ext 0.7" in fallback.basis
