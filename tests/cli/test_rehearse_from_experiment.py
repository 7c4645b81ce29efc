"""rehearse takes the plugins a user's own experiment attached (from the directory NeMo-Run saved)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, PreemptionPlugin
from nemo_resiliency_plugins.tools.cli import UsageError, plugins_for

SCRIPT = textwrap.dedent(
    """
    import sys
    import nemo_run as run
    from nemo_resiliency_plugins import FaultTolerancePlugin, PreemptionPlugin

    if __name__ == "__main__":
        base = sys.argv[1]
        task = run.Script(path="train.py", entrypoint="python", args=["checkpoint.save=/ckpt"])
        plugins = [FaultTolerancePlugin(num_in_job_restarts=5, section_timeouts={"setup": 300, "step": 42,
                   "checkpointing": 200}), PreemptionPlugin(preempt_time=90)]
        with run.Experiment("user-exp", base_dir=base) as exp:
            exp.add(task, executor=run.LocalExecutor(ntasks_per_node=2), plugins=plugins, name="train")
            exp.dryrun(log=False, delete_exp_dir=False)
            print("EXPDIR", exp._exp_dir)
    """
)


def test_plugins_of_a_saved_experiment_are_the_users_own(tmp_path):
    script = tmp_path / "my_experiment.py"
    script.write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    exp_dir = next(line.split(" ", 1)[1] for line in out.stdout.splitlines() if line.startswith("EXPDIR"))
    plugins = plugins_for(exp_dir)()
    ft = next(p for p in plugins if isinstance(p, FaultTolerancePlugin))
    pre = next(p for p in plugins if isinstance(p, PreemptionPlugin))
    assert ft.num_in_job_restarts == 5 and ft.section_timeouts["step"] == 42
    assert pre.preempt_time == 90
    with pytest.raises(UsageError, match="--set applies to recipes"):
        plugins_for(exp_dir, {"FaultTolerancePlugin": {"num_in_job_restarts": 1}})


def test_a_recipe_name_still_works_and_an_unknown_one_is_refused():
    assert [type(p).__name__ for p in plugins_for("local-smoke")()] == ["FaultTolerancePlugin"]
    with pytest.raises(UsageError, match="unknown recipe 'no-such-recipe'"):
        plugins_for("no-such-recipe")
