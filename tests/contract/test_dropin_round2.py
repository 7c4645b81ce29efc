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
