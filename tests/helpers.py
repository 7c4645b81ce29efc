"""Test helpers that drive the real NeMo-Run code paths (Experiment.add applies plugins, package() builds
the command torchx would launch)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import nemo_run as run
from nemo_run.run.torchx_backend.packaging import package


def add_job(task, executor, plugins, name: str = "train"):
    """Add ``task`` to a real Experiment (which clones it and runs every plugin's setup) and return the job."""
    with run.Experiment(f"t-{name}", executor=executor) as exp:
        exp.add(task, executor=executor, plugins=plugins, name=name)
        return exp.jobs[0]


def launch_command(job) -> tuple[str, list[str], dict[str, str]]:
    """(entrypoint, args, env) of the role NeMo-Run would launch for ``job``."""
    app = package(job.id, job.task, job.executor, serialize_to_file=False)
    role = app.roles[0]
    return role.entrypoint, list(role.args), dict(role.env)


def workload_script(save_dir: Path, fault: str | None, *, step_time: str, fault_step: int, fault_rank: int = 1):
    """The reference workload as a run.Script saving into ``save_dir``, with an optional injected fault."""
    from nemo_resiliency_plugins.testing.local_run import workload_task

    env = {"NRP_STEP_TIME": step_time}
    if fault:
        env |= {"NRP_FAULT": fault, "NRP_FAULT_STEP": str(fault_step), "NRP_FAULT_RANK": str(fault_rank)}
    return workload_task([f"checkpoint.save={save_dir}"], env=env)


def final_params(save_dir: Path) -> dict:
    import torch

    return torch.load(Path(save_dir) / "final_params.pt")


def assert_same_params(a: dict, b: dict) -> None:
    """Bit-identical parameters: nothing was lost to the fault."""
    import torch

    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


TRAIN = "/tmp/nrp-train.py"

#: Timeout of a child process that imports NeMo-Run or Megatron Bridge in a fast test. It only catches a hung child:
#: a healthy one ends far sooner, however loaded the host. Importing Megatron Bridge takes about 13 s on a quiet
#: 2-core machine and has taken over 180 s there at a load average of 20 (other work beside the tests), so a bound
#: near the quiet time fails healthy runs (issue 28).
HANG_GUARD_S = 900


def local(**kw):
    """A 2-rank LocalExecutor, as the unit tests use it."""
    return run.LocalExecutor(ntasks_per_node=2, **kw)


def slurm(tmp_path, **kw):
    """A 2-rank SlurmExecutor with a LocalTunnel under ``tmp_path`` (dry runs only)."""
    return run.SlurmExecutor(
        account="acct",
        partition="debug",
        nodes=1,
        ntasks_per_node=2,
        time="00:30:00",
        tunnel=run.LocalTunnel(job_dir=str(tmp_path / "slurm-jobs")),
        packager=run.Packager(),
        **kw,
    )


class LogRecords(logging.Handler):
    """The records one logger emits, on a handler of that logger's own."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def logged(name: str, level: int = logging.WARNING) -> Iterator[LogRecords]:
    """Collect what logger ``name`` emits at ``level`` and above, whatever earlier tests did to logging.

    Not pytest's caplog: caplog's handler sits on the root logger, and NeMo-Run replaces the root logger's
    handlers whenever an Experiment is created (``configure_logging(force=True)``) and drops the first one when
    an Experiment is garbage-collected (``Experiment.__del__``), which can happen in the middle of a later test.
    A library's ``logging.config`` call may also have disabled loggers it does not name.
    """
    logger = logging.getLogger(name)
    handler, saved = LogRecords(level), (logger.level, logger.disabled)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.disabled = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.disabled = saved[1]
