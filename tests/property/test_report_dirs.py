"""Property: ``nemo-resiliency report`` over generated job directories (issue 47's acceptance) -- special files
named like logs, huge and malformed lines, time stamps across a year, node ranges of any size, flight dumps of
random bytes -- ends with exit 0 and a report, or one line on stderr and exit 2; within a memory limit and a time
limit (the child process's: a hang or a blow-up is a failure, not a slow pass); and never runs code from the
directory."""

from __future__ import annotations

import json
import os
import subprocess

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins.core.diagnostics import FLIGHT_RECORDER_PREFIX
from tests.report_dirs import GOOD_LOG, report_cli

_stamp = st.builds(
    lambda y, mo, d, h: f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:59:59,999 [INFO] [infra:0(4242)] x",
    st.integers(0, 9999),
    st.integers(0, 14),
    st.integers(0, 33),
    st.integers(0, 25),
)
_glog = st.builds(
    lambda mo, d: f"I{mo:02d}{d:02d} 23:59:59.000000 4242 torch/distributed/elastic/agent/server/api.py:1] x",
    st.integers(0, 13),
    st.integers(0, 32),
)
_number = st.one_of(st.integers(-5, 10**6).map(str), st.integers(1, 6000).map(lambda n: "9" * n))
_line = st.one_of(
    _stamp,
    _glog,
    _number.map(lambda n: f"[default0]:[rank0] FINISHED step={n} params_sha256=ab"),
    _number.map(lambda n: f"failed (exitcode: {n}) local_rank: {n} (pid: 1) of binary: x"),
    _number.map(lambda n: f"  restart_count={n}"),
    _number.map(lambda n: f"[infra:{n}(1)] Assigned active rank {n} (round={n})"),
    _number.map(lambda n: f"Cycle: {n} Event: failure_detected Node: h_1_0 Rank: {n} Time: 2026-02-30 10:00:00.0"),
    st.integers(1, 300_000).map(lambda n: "successfully loaded checkpoint from " * (n // 36 + 1)),
    st.text(max_size=200),
)
_nodelist = st.one_of(
    st.just("nrp-node[1-2]"),
    st.builds(lambda a, b: f"n[{a}-{b}]", st.integers(0, 10**13), st.integers(0, 10**13)),
    st.text(alphabet="n[]-,0123456789", max_size=30),
)
_special = st.sampled_from(["none", "fifo", "dir"])


def _write(root, lines, nodelist, special_log, special_batch, dump) -> str:
    job = root / "exp" / "job"
    job.mkdir(parents=True)
    (job / "log-job_0.out").write_text(GOOD_LOG + "\n".join(lines) + "\n")
    (job / "sbatch_job.out").write_text(f"++ scontrol show hostnames '{nodelist}'\n" + "\n".join(lines) + "\n")
    for name, kind in (("log-job_1.out", special_log), ("sbatch_more.out", special_batch)):
        if kind == "fifo":
            os.mkfifo(job / name)
        elif kind == "dir":
            (job / name).mkdir()
    (job / f"{FLIGHT_RECORDER_PREFIX}0").write_bytes(dump)
    return str(job)


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(_line, max_size=12),
    nodelist=_nodelist,
    special_log=_special,
    special_batch=_special,
    dump=st.one_of(st.binary(max_size=1024), st.just(b"\x80\x04\x8e" + (2**40).to_bytes(8, "little") + b"x")),
)
def test_report_on_any_directory_is_a_report_or_one_line(tmp_path_factory, lines, nodelist, special_log,
                                                         special_batch, dump):  # fmt: skip
    job = _write(tmp_path_factory.mktemp("d"), lines, nodelist, special_log, special_batch, dump)
    try:
        done = report_cli(job, "--json", timeout=60)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"report did not end on {job}") from exc
    if done.returncode == 0:
        (data,) = json.loads(done.stdout)
        assert data["attempts"][0]["cycles"], data  # the good lines are still reported
    else:
        assert done.returncode == 2, done.stderr[-3000:]
        assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("nemo-resiliency report"), (
            done.stderr[-3000:]
        )


def test_report_runs_no_code_from_a_crafted_config(tmp_path):
    """A ``_CONFIG`` whose building would run a command: reading the job must not build it (issue 47 item 1,
    helper C's fix of report/plan.py's reading of saved plugins; this test is the report's side of it)."""
    import subprocess as sp

    import fiddle as fdl
    from nemo_run.core.serialization.zlib_json import ZlibJSONSerializer

    marker = tmp_path / "ran"
    _write(tmp_path, [], "nrp-node[1-2]", "none", "none", b"")
    crafted = ZlibJSONSerializer().serialize(fdl.Config(sp.call, ["touch", str(marker)]))
    (tmp_path / "exp" / "_CONFIG").write_text(crafted)
    done = report_cli(str(tmp_path / "exp"), timeout=120)
    assert not marker.exists(), "the report ran code from the directory it read"
    assert done.returncode in (0, 2), done.stderr[-2000:]
