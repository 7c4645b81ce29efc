"""``nemo-resiliency plan --from`` (issue 52) on real jobs' logs (tests/fixtures/job-logs/, described in
tests/unit/test_report.py): the figures it measures, plan's account of the job's own faults against the goodput report
measured, the settings it prints as a recipe call that builds, and its one-line refusals.

The GPU job's log (benchmarks/results/gpu/2026-12-05/call1/nemorun/nemorun_combined.log: Megatron Bridge's own
pretrain() under NeMo-Run's LocalExecutor with FaultTolerancePlugin on a lent H200, a SIGKILL at step 25) gives
the restart's phases from Megatron Bridge's own setup lines.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tarfile
from pathlib import Path

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.job.log_lines import MB_ITERATION as TRAINING_LOG
from nemo_resiliency_plugins.recipes import get_recipe
from nemo_resiliency_plugins.tools.cli import main
from nemo_resiliency_plugins.tools.planning.from_job import predict_job
from nemo_resiliency_plugins.tools.planning.measured import PHASES, measure, restart_phases
from nemo_resiliency_plugins.tools.report import report_experiment, report_job

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "job-logs"
GPU_LOG = ROOT / "benchmarks" / "results" / "gpu" / "2026-12-05" / "call1" / "nemorun" / "nemorun_combined.log"


def _unpack(name: str, tmp_path: Path) -> Path:
    with tarfile.open(FIXTURES / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / name


def _kill_then_hang(tmp_path: Path) -> Path:
    """The kill-then-hang job as NeMo-Run saved it (its plugins load from _CONFIG/_TASKS)."""
    (exp,) = (_unpack("experiment-ft-kill-then-hang", tmp_path) / "experiments" / "ft-kill-hang").iterdir()
    return exp


def _spare_job_plugins() -> list:
    """The "spare" job's FaultTolerancePlugin of tests/slurm/test_fault_tolerance_slurm.py (_two_nodes, _ft): its
    saved experiment lacks NeMo-Run's _TASKS, so the settings are given as they were set."""
    return [
        FaultTolerancePlugin(
            num_in_job_restarts=2,
            num_job_retries_on_failure=1,
            spare_nodes=2,
            section_timeouts={"setup": 300, "step": 10, "checkpointing": 120},
            out_of_section_timeout=120,
            workload_check_interval=2,
            calc_ft_timeouts=False,
        )
    ]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    out, err = capsys.readouterr()
    return done.value.code, out, err


def test_the_measured_figures_are_the_logs_own(tmp_path):
    """Step time: the median training_log time of the iterations that follow neither a save nor a cycle's start;
    save cost: the iteration after a save less that; the faults by plan's class; report's goodput."""
    exp = _kill_then_hang(tmp_path)
    m = measure(exp)
    lines = [TRAINING_LOG.search(line) for log in exp.glob("**/combined.log") for line in log.read_text().splitlines()]
    times = [float(x.group(3)) for x in lines if x]
    assert min(times) / 1e3 < m.step_time_s < statistics.mean(times) / 1e3
    assert 0 < m.save_s < max(times) / 1e3
    assert m.saves == 3  # steps 5, 10 then 15 (after the kill's resume from 10): each followed by a step
    assert m.faults == {"dead_process": 1, "hang": 1}
    assert m.fired_timeouts == [None, 5.0]  # the hang: NVRx's step section timeout, as the plugin set it
    assert m.goodput == report_job(m.job_dir).goodput()
    assert m.restart_s == statistics.median(r.restart_measured_s for r in m.vs_plan)


@pytest.mark.parametrize("fixture", ["experiment-ft-kill-then-hang", "slurm-spare-assignment-before-restart-line"])
def test_plans_account_of_the_job_is_within_the_measured_goodputs_margin(tmp_path, fixture):
    """Plan's model for the job's own fault sequence (its detection per fault, the measured step, save cost and
    restarts, nothing taken as "the rest of the wall") against report's measured goodput, within what the
    whole-second stamps of Megatron Bridge's training_log lines allow; on the LocalExecutor kill-then-hang job and
    the Slurm spare job (a lost node seen by its exit, then a frozen one by the step timeout)."""
    if fixture.startswith("experiment"):
        m = measure(_kill_then_hang(tmp_path))
    else:
        m = measure(_unpack(fixture, tmp_path), _spare_job_plugins())
        assert m.faults == {"node_loss": 2}
    job = predict_job(m)
    assert 0 < job.margin < m.goodput / 4, (job, m.goodput)
    assert abs(job.goodput - m.goodput) <= job.margin, (job, m.goodput)
    assert abs(job.wall_s - m.wall_s) <= job.margin / job.goodput * job.wall_s


def test_plan_from_prints_settings_a_recipe_builds_and_the_prediction(tmp_path, capsys):
    """``plan --from`` on the kill-then-hang job at 16,384 GPUs: the recommended set beats the job's own plugins,
    and the printed recipe call builds plugins with the recommended settings."""
    exp = _kill_then_hang(tmp_path)
    code, out, err = _run(capsys, "plan", "--from", str(exp), "--gpus", "16384", "--json")
    assert code == 0, err
    data = json.loads(out)
    sets = {s["name"]: s["goodput_simulated"] for s in data["plan"]["sets"]}
    assert sets["recommended"] > sets["yours"] > sets["megatron-bridge-defaults"]
    assert data["plan"]["params"]["step_time_s"] == data["measured"]["step_time_s"]
    assert data["plan"]["params"]["restart_s"] == data["measured"]["restart_s"]
    plugins = eval(data["recipe_call"], {"get_recipe": get_recipe})  # noqa: S307 - the printed call, as pasted
    ft = next(p for p in plugins if type(p).__name__ == "FaultTolerancePlugin")
    rec = data["plan"]["recommendation"]
    assert ft.num_in_job_restarts == rec["num_in_job_restarts"] and ft.calc_ft_timeouts is False
    assert ft.section_timeouts["step"] >= rec["section_timeouts"]["step"]  # rounded up, never down
    code, out, _ = _run(capsys, "plan", "--from", str(exp), "--gpus", "16384")
    text = " ".join(out.split())
    assert (
        code == 0 and "paste into the experiment script" in text and "plugins = get_recipe('slurm-pretraining'" in text
    )
    assert f"measured {data['measured']['goodput']:.4f} (report), plan's model for its own faults" in text


def test_plan_from_on_the_slurm_spare_job_with_the_plugins_given(tmp_path, capsys):
    """The Slurm spare job's saved experiment cannot be loaded (no _TASKS): refused in one line, then with
    ``--plugins`` (a recipe's) its figures and a prediction."""
    root = _unpack("slurm-spare-assignment-before-restart-line", tmp_path)
    code, out, err = _run(capsys, "plan", "--from", str(root), "--gpus", "16384")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--plugins" in err
    code, out, err = _run(capsys, "plan", "--from", str(root), "--gpus", "16384", "--plugins", "local-smoke", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["measured"]["faults"] == {"node_loss": 2}
    assert 0 < data["job_prediction"]["goodput"] < 1 and 0 < data["plan"]["sets"][2]["goodput_simulated"] <= 1


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--step-time", "3"], "--from measures --step-time"),
        (["--restart-time", "30"], "--from measures --restart-time"),
    ],
)
def test_plan_from_refuses_figures_it_measures(tmp_path, capsys, argv, says):
    code, out, err = _run(capsys, "plan", "--from", str(tmp_path), "--gpus", "8", *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and says in err


def test_plan_without_from_still_needs_the_step_and_save_times(capsys):
    code, out, err = _run(capsys, "plan", "--gpus", "8", "--step-time", "2")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--save-time" in err


@pytest.mark.parametrize(
    ("fixture", "lacks"),
    [
        ("local-straggler-stop", "its logs lack"),  # torchrun, no saved FT plugins, no restart
        ("slurm-preempt-plain-interpreter", "its logs lack"),  # a plain interpreter: no launcher stamps
    ],
)
def test_plan_from_refuses_a_job_lacking_a_figure(tmp_path, capsys, fixture, lacks):
    root = _unpack(fixture, tmp_path)
    code, out, err = _run(capsys, "plan", "--from", str(root), "--gpus", "8", "--plugins", "local-smoke")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and lacks in err, err


def _gpu_job(tmp_path: Path) -> Path:
    job = tmp_path / "gpu-job"
    job.mkdir()
    shutil.copy(GPU_LOG, job / "combined.log")  # the name report reads a LocalExecutor job's log under
    return job


def test_restart_phases_from_megatron_bridges_own_lines_on_the_gpu_job(tmp_path):
    """Megatron Bridge's pretrain() restart after the SIGKILL: every phase read, in order, none negative, adding up
    to the restart's span (detection to the first training_log line)."""
    (restart,) = restart_phases(report_job(_gpu_job(tmp_path)))
    assert list(restart.phases) == list(PHASES)
    assert all(v is not None and v >= 0 for v in restart.phases.values()), restart
    assert restart.known_sum() == pytest.approx(restart.span_s, abs=1e-6)
    # NVRx's launcher waited for the GPU's memory before starting the new worker (its own line: 44 s)
    assert restart.phases["launcher"] > 44
    assert restart.phases["process group"] == pytest.approx(3.675, abs=1.0)  # "time to initialize megatron"


@pytest.mark.parametrize("fixture", ["local-ft-kill-then-hang", "slurm-spare-lost-then-frozen"])
def test_restart_phases_are_consistent_on_cpu_jobs(tmp_path, fixture):
    """Logs of jobs older than the workload's setup lines: the launcher's phase and the rest up to the first line;
    the phases read are ordered and add up to at most the restart's span."""
    (job,) = report_experiment(_unpack(fixture, tmp_path))
    restarts = restart_phases(job)
    assert restarts
    for r in restarts:
        known = [v for v in r.phases.values() if v is not None]
        assert all(v >= 0 for v in known) and r.phases["launcher"] is not None and r.phases["first step"] is not None
        assert sum(known) <= r.span_s + 1e-6


def test_report_prints_each_restarts_phases(tmp_path, capsys):
    """``report`` on the kill-then-hang job: a phases line per restart, and the same phases in --json (a log older
    than the workload's setup lines: the launcher's phase and the first step's, the others "-")."""
    exp = _kill_then_hang(tmp_path)
    code, out, err = _run(capsys, "report", str(exp), "--json")
    assert code == 0, err
    (data,) = json.loads(out)
    kill, hang = data["restart_phases"]
    assert list(kill["phases"]) == list(PHASES) and kill["phases"]["imports"] is None
    assert 0 < kill["phases"]["launcher"] < kill["span_s"]
    code, out, _ = _run(capsys, "report", str(exp))
    assert code == 0 and "restart after cycle 1 (attempt 0)" in " ".join(out.split())


def _phases_benchmark():
    """benchmarks/restart_phases.py as a module (a script, not a package's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nrp_restart_phases", ROOT / "benchmarks" / "restart_phases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_reads_a_gpu_jobs_log_it_did_not_run(tmp_path, capsys):
    """``restart_phases.py --log``: the GPU job's log, as the device call brings it back (nemorun_combined.log in a
    folder), gives the same restart as report's model does, printed with its largest phase; a folder without one
    log is refused in one line."""
    bench = _phases_benchmark()
    work = tmp_path / "work"
    work.mkdir()
    rows = bench.phase_rows(bench.logged_job(GPU_LOG.parent, work))
    (restart,) = restart_phases(report_job(_gpu_job(tmp_path)))
    assert rows == [{**restart.phases, "span": restart.span_s}]
    bench.print_rows(rows)
    out = capsys.readouterr().out
    assert f"0 | {restart.phases['launcher']:.3f} | " in out and "largest phase: launcher" in out
    with pytest.raises(SystemExit, match=r"wanted one combined.log .* found 0"):
        bench.logged_job(tmp_path, work)  # a folder holding none (its logs are in subfolders)
