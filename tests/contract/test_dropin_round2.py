"""Issue 48 (drop-in, round 2): upstream client shapes pinned under tests/fixtures/upstream, each as its users
write it, changed only in the plugin import."""

from __future__ import annotations

from pathlib import Path

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core.executor_config import NUMA_BINDING_LOST
from tests.contract.test_upstream_clients import _bootstrap_task, _main_slurm_executor
from tests.helpers import add_job

pytestmark = pytest.mark.contract

DOCS = Path(__file__).parents[2] / "docs" / "dropin.md"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_slurm_template_refusal_says_the_numa_binding_is_lost_and_the_page_says_the_same(tmp_path):
    """Finding 3: Megatron Bridge main's slurm_executor ends pre_cmds with a numactl prefix; the suggested
    launcher=None drops it. The refusal names what is lost, with the numactl command found, and docs/dropin.md
    holds the same sentence."""
    executor = _main_slurm_executor(tmp_path)
    with pytest.raises(ResiliencyConfigError) as err:
        add_job(_bootstrap_task(), executor, [FaultTolerancePlugin()])
    text = str(err.value)
    assert "SlurmTemplate" in text and "executor.launcher = None" in text, text
    assert NUMA_BINDING_LOST in text
    assert "Found: 'numactl --cpunodebind=$((SLURM_LOCALID/4)) --membind=$((SLURM_LOCALID/4))'" in text, text
    # The other pre_cmds (Megatron Bridge's repo-status print) are named for setup_lines; numactl is not.
    assert "setup_lines (bash /opt/Megatron-Bridge/docker/common/print_sha.sh" in text, text
    assert _flat(NUMA_BINDING_LOST) in _flat(DOCS.read_text())


def _dgx():
    import nemo_run as run

    return run.DGXCloudExecutor(
        base_url="http://127.0.0.1:9",
        kube_apiserver_url="http://127.0.0.1:9",
        client_id="a",
        client_secret="b",
        project_name="p",
        container_image="i",
        nodes=1,
        gpus_per_node=8,
        pvc_nemo_run_dir="/nemo-workspace/nemo_run",
        pvcs=[{"name": "c", "path": "/nemo-workspace"}],
    )


def _lepton():
    import nemo_run as run

    return run.LeptonExecutor(
        container_image="i",
        nemo_run_dir="/nemo-workspace/nemo_run",
        nodes=1,
        gpus_per_node=8,
        mounts=[{"path": "/nemo-workspace", "mount_path": "/nemo-workspace"}],
    )


@pytest.mark.parametrize("make", [_dgx, _lepton], ids=["DGXCloudExecutor", "LeptonExecutor"])
@pytest.mark.parametrize("plugin_cls", ["FaultTolerancePlugin", "PreemptionPlugin"])
def test_setup_called_directly_on_an_unassigned_executor_names_the_cause(make, plugin_cls, tmp_path, monkeypatch):
    """Finding 4 (in part): setup() outside an Experiment, as Megatron Bridge's unit tests call it, on real
    NeMo-Run executors. Before: AttributeError 'job_name', or a refusal naming pvc_nemo_run_dir = ''. Now: built,
    or one ResiliencyConfigError naming the unassigned field and both ways on; after executor.assign() (what
    Experiment.add does first) the same direct call builds."""
    import nemo_run as run

    import nemo_resiliency_plugins as nrp

    monkeypatch.setenv("NEMORUN_HOME", str(tmp_path))
    task = lambda: run.Script(path="/tmp/train.py", entrypoint="python", args=["checkpoint.save=/ck"])  # noqa: E731
    executor = make()
    try:
        getattr(nrp, plugin_cls)().setup(task(), executor)
    except ResiliencyConfigError as err:
        text = str(err)
        assert "executor.job_name" in text or "executor.pvc_job_dir" in text, text
        assert "pvc_nemo_run_dir" not in text and "Experiment" in text and "executor.assign(" in text, text
    assigned = make()
    assigned.assign("exp-1", str(tmp_path / "experiments" / "exp-1"), "train", "train")
    getattr(nrp, plugin_cls)().setup(task(), assigned)  # builds
    job = add_job(task(), make(), [getattr(nrp, plugin_cls)()])
    assert "checkpoint.load=/ck" in job.task.args


def _checkpoint_plugins():
    import nemo_resiliency_plugins as nrp

    return [
        nrp.FaultTolerancePlugin(),
        nrp.PreemptionPlugin(),
        nrp.AsyncCheckpointPlugin(),
        nrp.LocalCheckpointPlugin(
            non_persistent_local_ckpt_dir="/local/ckpt", non_persistent_save_interval=10, fallback_on_unreadable=False
        ),
    ]


#: task.args shapes and the one verdict every plugin gives for each (docs/dropin.md, "checkpoint.save: one rule")
SAVE_SHAPES = {
    # Megatron Bridge's tutorial: the directory comes from the script's YAML (the plugin cannot see it)
    "from the YAML": (["--config-file", "conf/llama32_1b_pretrain.yaml"], "warn"),
    # Megatron Bridge's performance scripts: a flag of the script's own
    "from a flag": (["--save_dir", "/lustre/ckpt"], "warn"),
    "shown as null": (["checkpoint.save=null"], "refuse"),
    "shown, relative": (["checkpoint.save=./checkpoints/llama32_1b", "checkpoint.save_interval=100"], "build"),
    "shown, absolute": (["checkpoint.save=/lustre/ckpt", "checkpoint.save_interval=100"], "build"),
}


@pytest.mark.parametrize("shape", list(SAVE_SHAPES))
def test_every_checkpoint_plugin_gives_the_same_verdict_on_checkpoint_save(shape):
    """Finding 2: one rule for all plugins (core/autoresume.shown_checkpoint_save): refuse what the task shows
    to be wrong, warn where the plugin cannot see. Before, Async and LocalCheckpoint refused the YAML and flag
    shapes that FT and Preemption built with a warning."""
    import nemo_run as run

    from tests.helpers import local, logged

    args, expected = SAVE_SHAPES[shape]
    verdicts = {}
    for plugin in _checkpoint_plugins():
        name = type(plugin).__name__
        task = run.Script(path="/tmp/train.py", entrypoint="python", args=list(args))
        with logged("nemo_resiliency_plugins.core.autoresume") as log:
            try:
                add_job(task, local(), [plugin])
            except ResiliencyConfigError as err:
                assert "checkpoint.save" in str(err), (name, str(err))
                verdicts[name] = "refuse"
                continue
        warned = [m for m in log.messages if f"{name}: the task does not show checkpoint.save" in m]
        verdicts[name] = "warn" if warned else "build"
        if warned:
            assert "To have it checked" in warned[0], warned[0]
    assert set(verdicts.values()) == {expected}, verdicts
