"""Combinations of plugins that cannot work are refused whichever order they are listed in."""

import nemo_run as run
import pytest

from nemo_resiliency_plugins import InProcessRestartPlugin, PreemptionPlugin, ResiliencyConfigError
from tests.helpers import add_job


def script():
    return run.Script(path="/tmp/train.py", entrypoint="python")


@pytest.mark.parametrize("order", ["inprocess-first", "preemption-first"])
def test_preemption_and_inprocess_restart_are_refused_in_either_order(order):
    plugins = [InProcessRestartPlugin(), PreemptionPlugin()]
    if order == "preemption-first":
        plugins.reverse()
    with pytest.raises(ResiliencyConfigError, match="InProcessRestartPlugin|exit_signal_handler|preemption"):
        add_job(script(), run.LocalExecutor(ntasks_per_node=2), plugins)
