"""``nemo-resiliency plan`` through the entry point in this process: bad arguments are one stderr line and exit
2, ``--json`` parses, ``--plot`` writes a PNG, ``--plugins`` reads a recipe or a saved experiment."""

from __future__ import annotations

import json
import re

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin
from nemo_resiliency_plugins.tools.cli import main

RUN = ["plan", "--gpus", "1024", "--step-time", "2", "--save-time", "30", "--days", "2"]


def call(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(list(args))
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


BAD = [
    (["plan", "--step-time", "2", "--save-time", "30"], "--gpus"),
    ([*RUN[:2], "0", *RUN[3:]], "--gpus 0"),
    ([*RUN[:2], "x", *RUN[3:]], "--gpus"),
    ([*RUN[:4], "nan", *RUN[5:]], "--step-time"),
    ([*RUN[:4], "inf", *RUN[5:]], "--step-time"),
    ([*RUN[:6], "-1", *RUN[7:]], "--save-time"),
    ([*RUN[:8], "0"], "--days"),
    ([*RUN[:8], "99999"], "--days"),
    ([*RUN, "--local-save-time", "0"], "--local-save-time"),
    ([*RUN, "--restart-time", "-5"], "--restart-time"),
    ([*RUN, "--save-interval", "nan"], "--save-interval"),
    ([*RUN, "--failure-rate", "bogus"], "--failure-rate"),
    ([*RUN, "--failure-rate", "hang=-1"], "hang"),
    ([*RUN, "--failure-rate", "nope=1e-6"], "nope"),
    ([*RUN, "--failure-rate", "1e-5", "--failure-profile", "llama3"], "give one of them"),
    ([*RUN, "--failure-profile", "llama2"], "--failure-profile 'llama2'"),
    ([*RUN, "--plugins", "nope"], "unknown recipe 'nope'"),
    ([*RUN, "--plugins", "/nonexistent/experiment"], "/nonexistent/experiment"),
    ([*RUN, "--plot", "/nonexistent/dir/p.png"], "--plot"),
    ([*RUN, "--plot", "plot.svg"], "--plot 'plot.svg'"),
]


@pytest.mark.parametrize(("argv", "mentions"), BAD, ids=[" ".join(a[9:]) or a[1] for a, _ in BAD])
def test_a_bad_argument_is_one_line_and_exit_2(capsys, argv, mentions):
    code, out, err = call(capsys, *argv)
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert re.match(r"nemo-resiliency( \w+)?: error: ", lines[0]), lines[0]
    assert mentions in lines[0], lines[0]
    assert "Traceback" not in out + err


def test_json_has_every_set_with_goodput_in_range(capsys):
    code, out, err = call(capsys, *RUN, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [s["name"] for s in data["sets"]] == ["megatron-bridge-defaults", "ours (slurm-pretraining)", "recommended"]
    for s in data["sets"]:
        assert 0 <= s["goodput_simulated"] <= 1 and 0 <= s["goodput_closed_form"] <= 1
        assert len(s["sweep"]["interval_s"]) == len(s["sweep"]["simulated"]) >= 10
    assert "arXiv:2407.21783" in data["failure_model"]["source"]
    rec = data["recommendation"]
    assert rec["section_timeouts"]["step"] == 10  # 5 x 2 s
    assert data["save_interval"]["daly_s"] > 0 and data["plot"] is None


def test_text_output_and_plot(capsys, tmp_path):
    png = tmp_path / "plan.png"
    code, out, err = call(capsys, *RUN, "--failure-rate", "hang=1e-5,dead_process=1e-5", "--plot", str(png))
    assert code == 0, err
    assert "recommended settings" in out and "predicted goodput" in out and f"plot: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plugins_from_a_saved_experiment_are_flagged(capsys, tmp_path):
    """The issue's example: a 180 s step timeout on a 2 s step costs 90 steps of the whole cluster per hang."""
    task = run.Script(path="train.py", entrypoint="python", args=["checkpoint.save=/ckpt"])
    plugin = FaultTolerancePlugin(calc_ft_timeouts=False, num_in_job_restarts=3)
    with run.Experiment("planexp", base_dir=str(tmp_path), log_level="ERROR") as exp:
        exp.add(task, executor=run.LocalExecutor(ntasks_per_node=2), plugins=[plugin], name="train")
        exp.dryrun(log=False, delete_exp_dir=False)
        exp_dir = exp._exp_dir
    capsys.readouterr()  # NeMo-Run's banners while the experiment was made
    code, out, err = call(capsys, *RUN[:2], "16384", *RUN[3:8], "54", "--plugins", exp_dir, "--json")
    assert code == 0, err
    data = json.loads(out)
    flags = {f["setting"]: f for f in data["flags"]}
    assert "each hang costs 91 steps" in flags["section_timeouts['step']"]["why"]
    assert "PreemptionPlugin" in flags
    assert data["plugins_from"] == exp_dir
    yours = data["sets"][1]
    assert yours["name"] == "yours" and yours["goodput_simulated"] < data["sets"][2]["goodput_simulated"]


def test_plugins_from_a_recipe(capsys):
    code, out, err = call(capsys, *RUN, "--plugins", "local-smoke", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["plugins_from"] == "local-smoke" and data["sets"][1]["name"] == "yours"
