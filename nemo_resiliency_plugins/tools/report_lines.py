"""Which lines of a job's log a launcher wrote (issue 51): only those decide a verdict in ``nemo-resiliency report``
(a restart, a failure's exit code, a detection, a rank's node), never a rank's output, which may quote NVRx's lines
verbatim. The requeue guard makes the same decision on the batch host with core/sbatch/log_lines.sh's
``NRP_RE_LAUNCHER`` (tests/unit/test_launcher_verdicts.py holds the two readings to one answer). Kept apart from
report.py so that report_nodes.py can use it without importing the report.
"""

from __future__ import annotations

import re

__all__ = ["GLOG", "is_launcher_line"]

# torch's launcher (torchrun's elastic agent) logging: month, day, time, no year. Only its own modules: a rank run by a
# plain interpreter logs torch's import warnings in the same format, after its start-up, which no launcher timed.
GLOG = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d+) +(\d+) torch/distributed/(?:run|launcher/|elastic/)")
# A launcher's own line, never a rank's (core/sbatch/log_lines.sh's NRP_RE_LAUNCHER, the same shape): NVRx 0.7's
# log_manager.py format (srun --label's "<task>: " in front where present); a rank's lines carry torch elastic's
# "[<role><local rank>]:" prefix instead (a rank that prints NVRx's verdict verbatim is not a launcher).
_LAUNCHER_LINE = re.compile(r"(?: *\d+: )?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d{3})? \[[A-Z]+\] \[[^]]*\] ")


def is_launcher_line(line: str) -> bool:
    """Whether a launcher wrote ``line``: NVRx's launcher or rank monitor (its log format), torch's elastic agent in
    the launcher process (its own modules' log format), srun itself, or the requeue guard. Only these decide a
    verdict (a restart, a failure's exit code, a detection); a rank's output never does (issue 51)."""
    return bool(
        _LAUNCHER_LINE.match(line) or GLOG.match(line) or line.startswith(("srun: ", "nemo-resiliency-plugins: "))
    )
