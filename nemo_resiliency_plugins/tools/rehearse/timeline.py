"""The rehearsal's timeline plot: one row per run, the phases of each (start-up, training, fault, detection,
recovery), read from the events the log watcher of :mod:`nemo_resiliency_plugins.tools.rehearse` recorded."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from nemo_resiliency_plugins.tools.rehearse.adapt import fmt_num
from nemo_resiliency_plugins.tools.rehearse.watch import DETECTIONS

if TYPE_CHECKING:
    from nemo_resiliency_plugins.tools.rehearse.report import RehearsalReport, RunOutcome


def write_timeline(report: RehearsalReport, path: str | os.PathLike) -> str | None:
    """A PNG with one bar per run, coloured by phase (start-up, training, fault -> detection, restart -> resume,
    training after the resume); None when matplotlib is not installed (it is optional)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        return None
    rows = [("baseline", report.baseline, None)] if report.baseline else []
    rows += [(f.fault, f.run, f) for f in report.faults if f.run is not None]
    colors = {
        "start-up (imports)": "lightgray",
        "training": "tab:blue",
        "fault -> detected": "tab:red",
        "detected -> resumed": "tab:orange",
        "training after resume": "tab:green",
        "shut-down": "gainsboro",
    }
    fig, ax = plt.subplots(figsize=(10, 0.8 * len(rows) + 2.0))
    for row, (_label, run, fault) in enumerate(rows):
        marks = _phase_marks(run)
        edges = [0.0, marks.get("training started"), marks.get("fault injected"), marks.get("detected")]
        edges += [marks.get("resumed"), marks.get("finished"), run.wall_s]
        names = list(colors)
        for i, name in enumerate(names):
            a, b = edges[i], next((e for e in edges[i + 1 :] if e is not None), None)
            if a is None or b is None or b <= a:
                continue
            ax.broken_barh([(a, b - a)], (row - 0.3, 0.6), color=colors[name])
        text = run.state
        if fault is not None:
            text = f"{fault.detected_by or 'not detected'}; detect {fmt_num(fault.detect_s)} s, "
            text += f"recover {fmt_num(fault.recover_s)} s; {run.state}"
        ax.text(run.wall_s + 1, row, text, va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [label for label, _, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since launch")
    ax.set_xlim(0, max(run.wall_s for _, run, _ in rows) * 1.6 + 5 if rows else 1)
    handles = [Patch(color=c, label=n) for n, c in colors.items()]
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=len(colors))
    ax.set_title("nemo-resiliency rehearse: " + ("OK" if report.ok else "FAILED"))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def _phase_marks(run: RunOutcome) -> dict[str, float]:
    """First time of each phase boundary in a run's events (detection and resume only after the fault)."""

    marks: dict[str, float] = {}
    for t, what in run.events:
        what = what.removeprefix("requeued: ")
        if what == "training started" or what == "fault injected":
            marks.setdefault(what, t)
        elif what in DETECTIONS and "fault injected" in marks:
            marks.setdefault("detected", t)
        elif what == "resumed" and "fault injected" in marks:
            marks.setdefault("resumed", t)
        elif what == "finished":
            marks["finished"] = t
    return marks


__all__ = ["write_timeline"]
