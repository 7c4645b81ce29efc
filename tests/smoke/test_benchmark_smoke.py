"""The recovery benchmark's smoke variant runs end to end and writes its table with every row.

Speed is never asserted here: the benchmark prints and writes its figures (benchmarks/recovery.py).
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
        [sys.executable, str(SCRIPT), "--smoke", "--out", str(tmp_path)],
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
    # Every job of every case recovered (torchrun's restart included: see the workload's
    # _restarted_attempt_store) and the headline rows carry a figure on both sides.
    jobs = [line for line in proc.stdout.splitlines() if " rep 1: " in line]
    assert len(jobs) == 10, proc.stdout[-4000:]  # 4 cases x 2 variants + the warm reserve's fault-free and kill
    assert all(" rep 1: SUCCEEDED " in line for line in jobs), "\n".join(jobs)
    # The figures themselves are not judged here: the smoke run shares the machine with the rest of the suite
    # (two test workers), so a time lost can even come out negative; a quiet full run measures them.
    for rid in ("1c", "2b", "2f", "3c", "4a"):
        cells = next(line for line in text.splitlines() if line.startswith(f"| {rid} |")).split("|")
        baseline, ours = cells[3].strip(), cells[4].strip()
        assert FIGURE.match(baseline) and FIGURE.match(ours), f"row {rid} lacks a figure: {cells}"
    # The same table is printed.
    assert all(f"| {row} |" in proc.stdout for row in rows), proc.stdout[-4000:]
    # One timeline per fault case.
    for case in ("kill", "hang", "raise"):
        assert (tmp_path / f"{tables[0].stem}-{case}.png").exists(), f"no {case} timeline\n{proc.stdout[-3000:]}"
