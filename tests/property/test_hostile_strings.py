"""Hostile strings in every string a plugin reads or writes, through NeMo-Run's real dry run.

Each string goes into one slot: a plugin's string field, the experiment title, the task name, the tunnel's
job directory, a task override the plugins read (``checkpoint.save``), a user env var a plugin also sets, the
Slurm time limit. Then either the plugins refuse it with one :class:`ResiliencyConfigError` naming plugin and
field, or the job is accepted and

* ``exp.dryrun()`` works on LocalExecutor and SlurmExecutor (with ``run.LocalTunnel``),
* the sbatch script parses (``bash -n``),
* the whole sbatch script runs in a sandbox directory (``srun``/``scontrol`` are no-op programs there: no
  Slurm here) and no file named like the marker appears anywhere under the sandbox.

Every hostile string that would run a command tries to create that marker.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nemo_run as run
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins import (
    FaultTolerancePlugin,
    InProcessRestartPlugin,
    PreemptionPlugin,
    RerunStateMachinePlugin,
    ResiliencyConfigError,
    StragglerDetectionPlugin,
)

MARKER = "NRP_PWNED"
INJECTIONS = [
    f"$(touch {MARKER})",
    f"`touch {MARKER}`",
    f";touch {MARKER}",
    f"a&touch {MARKER}",
    f"a|touch {MARKER}",
    f"a\ntouch {MARKER}",
    f"a\rtouch {MARKER}",
    f"a\ttouch {MARKER}",
    f"a>{MARKER}",
    f"a&&touch {MARKER}",
    # Self-contained forms: the command ends before the rest of the line NeMo-Run writes after the value.
    f"a&touch {MARKER}&",
    f"a;touch {MARKER};",
    f"a|touch {MARKER}|",
    f"a;touch {MARKER};#",
    f"'; touch {MARKER}; '",
    f'"; touch {MARKER}; "',
    f"llama(8b)$(touch {MARKER})",
    "llama(8b)",
    "a&b",
    "a b",
    "x\n",
    "a\tb",
    "${HOME}",
    "a\\b",
    "{a,b}",
    "a*",
    "#x",
    "~x",
    "!x",
    "[x]",
    "a=b",
]
# Characters around the hostile ones, so that generated strings also look like real names.
_ALPHABET = "abcXYZ019_.-:@%+=,()&|;<>$`'\"\\ \t\n*?[]{}#!~^"
hostile = st.one_of(st.sampled_from(INJECTIONS), st.text(alphabet=_ALPHABET, min_size=1, max_size=16))
# Names NeMo-Run turns into directories (a '/' would be a sub-directory, not an injection).
hostile_name = hostile.filter(lambda s: "/" not in s and "\0" not in s and s not in (".", ".."))

SETTINGS = settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


def _sandbox() -> Path:
    root = Path(tempfile.mkdtemp(prefix="nrp-hostile-"))
    (root / "bin").mkdir()
    for program in ("srun", "scontrol", "sbatch"):  # Slurm is not here: each is a no-op program
        stub = root / "bin" / program
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    (root / "cwd").mkdir()
    return root


def _marker_found(root: Path) -> list[Path]:
    return [p for p in root.rglob(f"*{MARKER}*")]


def _slurm_executor(root: Path, job_dir: str | None = None, **kw) -> run.SlurmExecutor:
    return run.SlurmExecutor(
        account="acct",
        partition="debug",
        nodes=1,
        ntasks_per_node=2,
        time=kw.pop("time", "00:30:00"),
        tunnel=run.LocalTunnel(job_dir=job_dir or str(root / "jobs")),
        packager=run.Packager(),
        **kw,
    )


def _task(args: list[str] | None = None) -> run.Script:
    return run.Script(path="/tmp/nrp-train.py", entrypoint="python", args=args or ["checkpoint.save=/ckpt"])


def _dryrun_script(
    task, executor, plugins, *, title: str = "hostile", name: str = "train", cwd: Path | None = None
) -> str | None:
    """The sbatch script (Slurm) or None (other executors) of a real ``exp.dryrun()``.

    NeMo-Run's Slurm packaging runs ``mkdir -p <job dir>`` through a shell in the current directory, reading
    stdin: it runs in the sandbox directory (so that anything it ran would leave the marker there) with an
    empty stdin (pytest's captured stdin refuses reads).
    """
    with contextlib.ExitStack() as stack:
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        devnull = stack.enter_context(open(os.devnull))
        saved, sys.stdin = sys.stdin, devnull
        stack.callback(setattr, sys, "stdin", saved)
        with run.Experiment(title, executor=executor, log_level="ERROR") as exp:
            exp.add(task, executor=executor, plugins=plugins, name=name)
            exp.dryrun(log=False)
            info = exp.jobs[0]._dryrun_info
    if isinstance(executor, run.SlurmExecutor):
        return str(info.request.materialize())
    return None


def _run_in_sandbox(script: str, root: Path) -> None:
    path = root / "sbatch.sh"
    path.write_text(script)
    parsed = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert parsed.returncode == 0, f"the sbatch script does not parse: {parsed.stderr}\n{script}"
    env = {
        "PATH": f"{root / 'bin'}:/usr/bin:/bin",
        "HOME": str(root),
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NODELIST": "localhost",
    }
    subprocess.run(["bash", str(path)], cwd=root / "cwd", env=env, capture_output=True, text=True, timeout=60)


def _assert_refusal(err: ResiliencyConfigError, plugins: tuple[str, ...]) -> None:
    text = str(err)
    assert "\n" not in err.plugin
    assert any(p in text for p in plugins), text
    assert err.field or err.detail, text


def _accept_or_refuse(build, *, slurm: bool = True, local: bool = True, title="hostile", name="train", job_dir=None):
    """Build plugins and task with ``build(root)``; a refusal must be ResiliencyConfigError, else prove safety."""
    root = _sandbox()
    try:
        try:
            plugins, task, executor_kw = build(root)
        except ResiliencyConfigError as err:
            _assert_refusal(err, PLUGIN_NAMES)
            return "refused"
        names = tuple(type(p).__name__ for p in plugins)
        outcome = "accepted"
        if local:
            try:
                _dryrun_script(
                    copy.deepcopy(task),
                    run.LocalExecutor(ntasks_per_node=2),
                    list(plugins),
                    title=title,
                    name=name,
                    cwd=root / "cwd",
                )
            except ResiliencyConfigError as err:
                _assert_refusal(err, names)
                outcome = "refused"
        if slurm:
            executor = _slurm_executor(root, job_dir=job_dir(root) if job_dir else None, **executor_kw)
            try:
                script = _dryrun_script(
                    copy.deepcopy(task), executor, list(plugins), title=title, name=name, cwd=root / "cwd"
                )
            except ResiliencyConfigError as err:
                _assert_refusal(err, names)
                return "refused"
            _run_in_sandbox(script, root)
        found = _marker_found(root)
        assert not found, f"a hostile string ran a command: {found}"
        return outcome
    finally:
        shutil.rmtree(root, ignore_errors=True)


PLUGIN_NAMES = (
    "FaultTolerancePlugin",
    "PreemptionPlugin",
    "StragglerDetectionPlugin",
    "RerunStateMachinePlugin",
    "InProcessRestartPlugin",
)

# (plugin class, string field, extra settings, runs on Slurm, a valid value)
STRING_FIELDS = [
    (FaultTolerancePlugin, "simulated_fault_type", {}, True, "rank_hung"),
    (FaultTolerancePlugin, "workload_style", {}, True, "heartbeats"),
    (FaultTolerancePlugin, "rank_termination_signal", {}, True, "SIGTERM"),
    (FaultTolerancePlugin, "log_level", {}, True, "debug"),
    (StragglerDetectionPlugin, "logger_name", {}, True, "my.logger"),
    (RerunStateMachinePlugin, "rerun_mode", {}, True, "report_determinism_stats"),
    (RerunStateMachinePlugin, "error_injection_type", {}, True, "persistent_error"),
    (PreemptionPlugin, "exit_signal", {}, True, "SIGINT"),
    (InProcessRestartPlugin, "granularity", {}, False, "rank"),
    (InProcessRestartPlugin, "monitor_process_logdir", {}, False, "/tmp/nrp-logs"),
]


def _near(valid: str) -> st.SearchStrategy[str]:
    """The valid value, and the valid value with something hostile around it."""
    return st.one_of(
        st.just(valid),
        st.builds(lambda h: valid + h, hostile),
        st.builds(lambda h: h + valid, hostile),
        st.sampled_from([valid + "\n", valid + " ", valid + ";"]),
    )


@pytest.mark.parametrize(
    ("cls", "field", "extra", "on_slurm", "valid"), STRING_FIELDS, ids=lambda v: getattr(v, "__name__", v)
)
@SETTINGS
@given(data=st.data())
def test_plugin_string_fields(cls, field, extra, on_slurm, valid, data):
    value = data.draw(st.one_of(hostile, _near(valid)), label=field)

    def build(root):
        return [cls(**extra, **{field: value})], _task(), {}

    outcome = _accept_or_refuse(build, slurm=on_slurm)
    # (monitor_process_logdir is refused on an executor without SLURM_PROCID for another reason: see the plugin)
    if value == valid and field != "monitor_process_logdir":
        assert outcome == "accepted", "the valid value itself must go through"


@SETTINGS
@given(key=hostile)
def test_section_timeout_names(key):
    def build(root):
        return [FaultTolerancePlugin(calc_ft_timeouts=False, section_timeouts={key: 10.0})], _task(), {}

    _accept_or_refuse(build)


def _ft_and_preemption(root):
    return [FaultTolerancePlugin(), PreemptionPlugin()], _task(), {}


@SETTINGS
@given(title=hostile_name)
def test_experiment_title(title):
    outcome = _accept_or_refuse(_ft_and_preemption, title=title, local=False)
    assert outcome in ("accepted", "refused")


@SETTINGS
@given(name=hostile_name)
def test_task_name(name):
    _accept_or_refuse(_ft_and_preemption, name=name, local=False)


@SETTINGS
@given(part=hostile_name)
def test_tunnel_job_dir(part):
    _accept_or_refuse(_ft_and_preemption, job_dir=lambda root: str(root / part), local=False)


@SETTINGS
@given(value=hostile)
def test_checkpoint_dir_override_the_plugins_read(value):
    def build(root):
        return [PreemptionPlugin(), FaultTolerancePlugin()], _task([f"checkpoint.save={value}"]), {}

    _accept_or_refuse(build)


@SETTINGS
@given(value=hostile)
def test_user_env_var_a_plugin_sets(value):
    def build(root):
        task = _task()
        task.env = {"PET_MAX_RESTARTS": value}
        return [FaultTolerancePlugin(num_in_job_restarts=2)], task, {}

    _accept_or_refuse(build)


@SETTINGS
@given(value=hostile)
def test_slurm_time_limit(value):
    def build(root):
        return [PreemptionPlugin(), FaultTolerancePlugin()], _task(), {"time": value}

    _accept_or_refuse(build, local=False)


@SETTINGS
@given(value=st.one_of(hostile, _near("B:TERM@60")))
def test_slurm_signal_the_user_already_set(value):
    def build(root):
        return [PreemptionPlugin(), FaultTolerancePlugin()], _task(), {"signal": value}

    outcome = _accept_or_refuse(build, local=False)
    if value == "B:TERM@60":
        assert outcome == "accepted"


@SETTINGS
@given(value=st.one_of(hostile, _near("torchrun")))
def test_launcher_name_the_user_already_set(value):
    def build(root):
        return [FaultTolerancePlugin()], _task(), {"launcher": value}

    _accept_or_refuse(build, local=False)


# ----------------------------------------------------------------------------- the cases of issue 17, named


@pytest.mark.parametrize(
    ("title", "name", "field"),
    [("llama(8b)", "train", "experiment title"), ("a&b", "train", "experiment title"), ("ok", "t\tx", "task name")],
)
def test_job_dir_metacharacters_are_refused_naming_what_to_rename(title, name, field):
    root = _sandbox()
    with pytest.raises(ResiliencyConfigError) as info:
        _dryrun_script(_task(), _slurm_executor(root), [FaultTolerancePlugin()], title=title, name=name)
    assert info.value.field == field and info.value.plugin == "FaultTolerancePlugin"
    assert "rename" in str(info.value)
    shutil.rmtree(root, ignore_errors=True)


def test_a_plain_job_runs_its_sbatch_script_in_the_sandbox():
    """The sandbox itself works: a clean job's script parses and runs, and writes the ft_launcher config."""
    root = _sandbox()
    script = _dryrun_script(
        _task(), _slurm_executor(root), [FaultTolerancePlugin(), PreemptionPlugin()], cwd=root / "cwd"
    )
    _run_in_sandbox(script, root)
    written = list((root / "jobs").rglob("*-ft_launcher.yaml"))
    assert written and "rank_section_timeouts" in written[0].read_text()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("value", [f"a;touch {MARKER};", f"a&touch {MARKER}&", f"a|touch {MARKER}|"])
def test_the_sandbox_sees_an_injection(value):
    """The detector works: NeMo-Run writes a user's own env var unquoted, and the marker appears. (A user's
    own env_vars are the user's code; the plugins' job is that nothing *they* write does this.)"""
    root = _sandbox()
    executor = _slurm_executor(root, env_vars={"USER_VALUE": value})
    script = _dryrun_script(_task(), executor, [PreemptionPlugin()], cwd=root / "cwd")
    assert f"export USER_VALUE={value}" in script
    _run_in_sandbox(script, root)
    assert _marker_found(root)
    shutil.rmtree(root, ignore_errors=True)


def test_newline_terminated_logger_name_is_refused():
    with pytest.raises(ResiliencyConfigError, match="logger_name"):
        StragglerDetectionPlugin(logger_name="x\n")
    with pytest.raises(ResiliencyConfigError, match="section_timeouts"):
        FaultTolerancePlugin(calc_ft_timeouts=False, section_timeouts={"step\n": 10.0})
