"""The recovery benchmark's smoke variant runs end to end and writes its table with every row.

Speed is never asserted here: the benchmark prints and writes its figures (benchmarks/recovery.py). The smoke run
takes the fault-free case only (a torchrun job and an ft_launcher job), plus the import and Experiment.add
measurements: every row is written (a case left out reads n/a) and the rows of the case run carry figures. The
fault cases' jobs are the same launches the smoke tests of each plugin prove (kill, hang, raise, warm reserve:
tests/smoke/); all four cases cost 680 s of a loaded CI run, over a quarter of the CI budget, to prove the
benchmark's bookkeeping. A full run (``python benchmarks/recovery.py``) covers them and draws their timelines.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "recovery.py"
FIGURE = re.compile(r"-?[0-9]+(\.[0-9]+)?\b")  # a number leads the cell (min / median / max may follow)


def _benchmark_rows() -> tuple[str, ...]:
    """The row ids the benchmark's table must have (ROWS: recovery_lib/settings.py, re-exported by recovery.py)."""
    name = "nrp_recovery_benchmark"
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module.ROWS


@pytest.mark.slow
def test_smoke_benchmark_writes_every_row(tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--cases", "fault-free", "--setup-tasks", "20", "--out", tmp_path],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    tables = list(tmp_path.glob("recovery-*-smoke.md"))
    assert len(tables) == 1, sorted(p.name for p in tmp_path.iterdir())
    text = tables[0].read_text()
    for heading in ("## Machine", "## Results", "## Where the time of a recovery goes"):
        assert heading in text
    table_rows = {line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")}
    rows = _benchmark_rows()
    missing = [row for row in rows if row not in table_rows]
    assert not missing, f"rows missing from the table: {missing}\n{text}"
    # Both jobs of the case succeeded and its headline row carries a figure on both sides.
    jobs = [line for line in proc.stdout.splitlines() if " rep 1: " in line]
    assert len(jobs) == 2, proc.stdout[-4000:]  # the fault-free case's two variants: torchrun, ft_launcher + plugin
    assert all(" rep 1: SUCCEEDED " in line for line in jobs), "\n".join(jobs)
    # The figures themselves are not judged here: the smoke run shares the machine with the rest of the suite
    # (two test workers), so a time lost can even come out negative; a quiet full run measures them.
    for rid in ("1c",):
        cells = next(line for line in text.splitlines() if line.startswith(f"| {rid} |")).split("|")
        baseline, ours = cells[3].strip(), cells[4].strip()
        assert FIGURE.match(baseline) and FIGURE.match(ours), f"row {rid} lacks a figure: {cells}"
    # The same table is printed.
    assert all(f"| {row} |" in proc.stdout for row in rows), proc.stdout[-4000:]
    # The cases left out say so in their rows, and no timeline is drawn without a fault run.
    for rid in ("2b", "3c", "4a"):
        cells = next(line for line in text.splitlines() if line.startswith(f"| {rid} |")).split("|")
        assert "n/a" in cells[3] + cells[4], f"row {rid} of a case not run has a figure: {cells}"
    assert not list(tmp_path.glob("*.png")), sorted(p.name for p in tmp_path.iterdir())
