"""Tests of the reference workload (nemo_resiliency_plugins.testing.workload) and its TE accommodation.

Real runs only: torchrun (or plain python) launches real gloo ranks on CPU; Megatron Bridge's real config, override
parser run inside them. Multi-process tests are marked ``slow``. The workload under NVRx's ft_launcher (kill,
hang, ``ft_state.json`` round trip) is proven through the plugin in tests/smoke/test_fault_tolerance_local.py, a
plain rerun after a fault by every resuming test there, and Megatron Bridge's signal handler (save, exit 0,
resume) by the Slurm preemption test (tests/slurm/test_preemption_slurm.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nemo_resiliency_plugins.job import log_lines as ll
from tests.helpers import HANG_GUARD_S, workload_env

REPO = Path(__file__).resolve().parents[2]
FT_OVERRIDE = (
    "ft={_target_:megatron.bridge.training.config.FaultToleranceConfig,enable_ft_package:true,calc_ft_timeouts:true}"
)
STEPS = 20
FINISHED_RE = re.compile(r"\[rank0\] " + ll.WORKLOAD_FINISHED_HASH.pattern + r"(?<=[0-9a-f]{64})(?![0-9a-f])")
WALL_TIMES: dict[str, float] = {}


# ------------------------------------------------------------------------------------------------ helpers
_env = workload_env  # the environment of a run this file starts itself (tests/helpers.py)


def _run(name: str, cmd: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )
    WALL_TIMES[name] = time.monotonic() - t0
    print(f"[{name}] rc={proc.returncode} wall={WALL_TIMES[name]:.1f}s")
    return proc


def _torchrun(nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]


def _workload(save: Path, *overrides: str, load: bool = True) -> list[str]:
    """The workload saving into ``save``; it resumes from there too (``checkpoint.load``) unless ``load=False``:
    Megatron Bridge 0.6.2, and so the workload, resume only from ``checkpoint.load``."""
    resume = [f"checkpoint.load={save}"] if load else []
    return ["-m", "nemo_resiliency_plugins.testing.workload", f"checkpoint.save={save}", *resume, *overrides]


def _finished(output: str) -> tuple[int, str]:
    m = FINISHED_RE.search(output)
    assert m, f"no FINISHED line in output:\n{output[-6000:]}"
    return int(m.group(1)), m.group(2)


def _tail(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-8000:]


# ------------------------------------------------------------------------------------------------ te_compat
def test_te_compat_is_noop_when_transformer_engine_importable(tmp_path):
    """With a (fake, on-path) transformer_engine package the accommodation must not install anything."""
    fake = tmp_path / "site" / "transformer_engine"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    code = textwrap.dedent(
        """
        import sys
        from nemo_resiliency_plugins.testing import te_compat
        r = te_compat.ensure_megatron_bridge_importable()
        assert r is False, r
        assert not any(isinstance(f, te_compat._LoraLayersFinder) for f in sys.meta_path)
        print("OK")
        """
    )
    env = _env(PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(REPO)]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr


def test_te_compat_makes_config_importable_without_faking_te():
    code = textwrap.dedent(
        """
        import importlib.util, sys
        assert importlib.util.find_spec("transformer_engine") is None, "this test needs a host without TE"
        from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable
        assert ensure_megatron_bridge_importable() is True
        assert ensure_megatron_bridge_importable() is True  # idempotent
        n = len(sys.meta_path)
        ensure_megatron_bridge_importable()
        assert len(sys.meta_path) == n
        import megatron.bridge.training.config as c
        assert hasattr(c, "ConfigContainer") and hasattr(c, "FaultToleranceConfig")
        assert not [m for m in sys.modules if m.split(".")[0] == "transformer_engine"], "TE faked"
        import megatron.bridge.peft.lora_layers as ll
        try:
            ll.te.ops.Sequential()
        except ImportError:
            pass
        else:
            raise AssertionError("placeholder must refuse instantiation")
        print("OK")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=HANG_GUARD_S
    )
    assert "needs a host without TE" not in proc.stderr, "this proves the shim where Transformer Engine is absent"
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-4000:]


# ------------------------------------------------------------------------------------------ config (in-process)
@pytest.fixture(scope="module")
def wl():
    from nemo_resiliency_plugins.testing import workload

    return workload


def test_reference_config_is_valid_and_leaves_resiliency_configs_unset(wl, tmp_path):
    cfg = wl.reference_config(str(tmp_path))
    assert type(cfg).__name__ == "ConfigContainer"
    assert cfg.ft is None and cfg.nvrx_straggler is None and cfg.inprocess_restart is None and cfg.straggler is None
    assert cfg.checkpoint.save == str(tmp_path)
    cfg.validate()  # Megatron Bridge's own validation passes


def test_dict_target_override_instantiates_real_fault_tolerance_config(wl):
    from megatron.bridge.training.config import FaultToleranceConfig
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    cfg = process_config_with_overrides(wl.reference_config(None), cli_overrides=[FT_OVERRIDE, "train.train_iters=7"])
    assert type(cfg.ft) is FaultToleranceConfig
    assert cfg.ft.enable_ft_package is True and cfg.ft.calc_ft_timeouts is True
    assert cfg.train.train_iters == 7


def test_unknown_override_key_fails_in_megatron_bridge_parser(wl):
    from megatron.bridge.training.utils.omegaconf_utils import OverridesError, process_config_with_overrides

    with pytest.raises(OverridesError, match="train.no_such_key"):
        process_config_with_overrides(wl.reference_config(None), cli_overrides=["train.no_such_key=1"])


def test_buildable_survives_nemo_run_validation_and_builds(wl, tmp_path):
    import fiddle as fdl
    import nemo_run as run
    from nemo_run.core.serialization.zlib_json import ZlibJSONSerializer

    task = run.Partial(wl.pretrain, config=wl.reference_config_buildable(str(tmp_path)))
    ser = ZlibJSONSerializer()
    assert ser.deserialize(ser.serialize(task)) == task
    exp = run.Experiment("nrp-workload-validate", base_dir=str(tmp_path / "exp"))
    exp._validate_task("t", task)  # what Experiment.add runs
    built = fdl.build(task)
    cfg = built.keywords["config"]
    assert type(cfg).__name__ == "ConfigContainer"
    assert cfg.ft is None and cfg.nvrx_straggler is None and cfg.inprocess_restart is None and cfg.straggler is None
    assert cfg.checkpoint.save == str(tmp_path) and cfg.env_vars == {}


def test_fault_spec_from_env(wl):
    spec = wl.FaultSpec.from_env({"NRP_FAULT": "hang", "NRP_FAULT_STEP": "13"})
    assert (spec.kind, spec.step, spec.rank, spec.step_time) == ("hang", 13, 1, 0.05)
    assert wl.FaultSpec.from_env({}).kind is None
    with pytest.raises(ValueError):
        wl.FaultSpec.from_env({"NRP_FAULT": "explode"})


# ------------------------------------------------------------------------------------------------ real runs
# reference_run (tests/conftest.py): the suite's shared fault-free 2-rank torchrun run, no FT.


@pytest.mark.slow
def test_two_ranks_torchrun_finishes(reference_run):
    save, proc = reference_run
    assert proc.returncode == 0, _tail(proc)
    assert _finished(proc.stdout)[0] == STEPS
    assert "[rank0] START rank=0 world=2 restart=0" in proc.stdout
    assert "[rank1] START rank=1 world=2 restart=0" in proc.stdout
    assert "STARTING from scratch" in proc.stdout
    assert '"ft_type": "NoneType"' in proc.stdout
    for step in (5, 10, 15, 20):
        assert f"[rank0] CHECKPOINT saved step={step}" in proc.stdout
        assert (save / f"iter_{step:07d}.pt").exists()
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    assert (save / "final_params.pt").exists()


@pytest.mark.slow
def test_single_rank_plain_python_finishes(tmp_path):
    proc = _run("python-1rank", [sys.executable, *_workload(tmp_path, "train.train_iters=8")], _env())
    assert proc.returncode == 0, _tail(proc)
    assert "[rank0] START rank=0 world=1 restart=0" in proc.stdout
    assert _finished(proc.stdout)[0] == 8
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "8"  # as Megatron Bridge writes it


@pytest.mark.slow
def test_save_without_load_trains_from_scratch_as_megatron_bridge_does(tmp_path):
    """The trap the plugins close: a run that names only checkpoint.save ignores the checkpoints already there,
    exactly as Megatron Bridge 0.6.2's _should_load_checkpoint does (it reads checkpoint.load alone). The
    resuming runs of this file (and every plugin, which wires checkpoint.load) name both."""
    first = _run("python-1rank-save-and-load", [sys.executable, *_workload(tmp_path, "train.train_iters=6")], _env())
    assert first.returncode == 0, _tail(first)
    assert (tmp_path / "iter_0000005.pt").exists()
    again = _run(
        "python-1rank-save-only",
        [sys.executable, *_workload(tmp_path, "train.train_iters=7", load=False)],
        _env(),
    )
    assert again.returncode == 0, _tail(again)
    assert "STARTING from scratch" in again.stdout and "RESUMED" not in again.stdout


@pytest.mark.slow
def test_plus_ft_override_gives_plain_dict_and_fails_like_a_real_run(tmp_path):
    """The known trap: `+ft.enable_ft_package=true` leaves a dict in cfg.ft; the workload must not hide it."""
    proc = _run(
        "python-1rank-plus-ft-dict",
        [sys.executable, *_workload(tmp_path, "+ft.enable_ft_package=true", "train.train_iters=2")],
        _env(),
    )
    assert '"ft_type": "dict"' in proc.stdout
    assert proc.returncode != 0
    assert "AttributeError" in proc.stdout and "enable_ft_package" in proc.stdout


def teardown_module(module):
    if WALL_TIMES:
        print("\nwall times: " + ", ".join(f"{k}={v:.1f}s" for k, v in WALL_TIMES.items()))
