"""Issue 20's benchmark rows, side by side from one device call: what a failure costs with persistent checkpoints
every K steps against node-local ones every k < K, and what a save costs the training step, sync against async.

Reads what ``.devcarry/run.sh``-style calls leave in ``OUT``: ``pretrain/summary.json`` (``pretrain_proof.py``'s
``base``, ``kill``, ``local`` and ``async`` cases: Megatron Bridge's real ``pretrain()``, one H200) and
``ckpt/checkpoint_proof.out`` (``checkpoint_gpu_proof``'s ASYNC line: a 512 MB-per-rank ``torch_dist`` save).
Prints the table and writes ``OUT/checkpoint_rows.md``. Figures are printed, never asserted.

Usage: ``python3 benchmarks/gpu/checkpoint_rows.py OUT``
"""

from __future__ import annotations

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pretrain_proof import FAULT_STEP  # noqa: E402  (the kill step of the kill and local cases)

from nemo_resiliency_plugins.job import log_lines as ll

LOCAL_INTERVAL = 2  # prepare.py's LocalCheckpointPlugin(non_persistent_save_interval=2); persistent K = 10


def _resumed_from(case: dict) -> int | None:
    steps = [int(m) for line in case.get("resume_lines", []) for m in ll.MB_LOADED.findall(line)]
    return max(steps) if steps else None


def lost_work_rows(summary: dict) -> list[str]:
    base = summary.get("base", {})
    median = (base.get("save_cost") or {}).get("median_step_s")
    rows = []
    cases = (("kill", "persistent every K=10"), ("local", "local every k=2 (+ persistent 10)"))
    for key, label in cases:
        case = summary.get(key)
        if not case:
            rows.append(f"| {label} | n/a (case not run) | | | | |")
            continue
        start = _resumed_from(case)
        redone = FAULT_STEP - start if start is not None else None
        redo_s = f"{redone * median:.3f}" if redone is not None and median else "n/a"
        met = "–" if key != "local" else "yes" if redone is not None and redone <= LOCAL_INTERVAL else "no"
        rows.append(
            f"| {label} | {start} | {redone} | {redo_s} | {case.get('fault_to_resumed_s')} | "
            f"{case.get('params_equal_base')} | {met} |"
        )
    return rows


def async_row(text: str) -> str:
    hit = re.search(r"^ASYNC (.*)$", text, re.M)
    if not hit:
        return "| async vs sync, 512 MB per rank | n/a (no ASYNC line) | | | | |"
    pairs = re.findall(r"(\w+)=(\S+)", hit[1])
    v = {k: float(x) if x not in ("True", "False") else float(x == "True") for k, x in pairs}
    extra = v["extra_s"]
    share = 100 * extra / v["sync_save_s"]
    row = (
        f"| 512 MB per rank, `checkpoint_gpu_proof` | {v['sync_save_s']:.3f} | {v['schedule_s']:.3f} | "
        f"{v['step_ms_idle']:.2f} -> {v['step_ms_during_save']:.2f} over {int(v['steps_during_save'])} steps | "
        f"{extra:.3f} ({share:.1f} %) | {'yes' if share <= 10 else 'no'} |"
    )
    return row


def pretrain_async_row(summary: dict) -> str:
    base, asy = summary.get("base", {}).get("save_cost"), summary.get("async", {}).get("save_cost")
    if not base or not asy:
        return "| tiny GPT, Megatron Bridge `pretrain()` | n/a | | | | |"
    b, a = base["after_save_step_s"].get("20"), asy["after_save_step_s"].get("20")
    return (
        f"| tiny GPT (6.6 MB), Megatron Bridge `pretrain()`, save at step 20 | step 20 took {b} s "
        f"(median {base['median_step_s']}) | step 20 took {a} s (median {asy['median_step_s']}) | | | |"
    )


def main(out: str) -> int:
    with open(os.path.join(out, "pretrain", "summary.json")) as f:
        summary = json.load(f)
    ckpt_path = os.path.join(out, "ckpt", "checkpoint_proof.out")
    ckpt = open(ckpt_path).read() if os.path.exists(ckpt_path) else ""
    row = async_row(ckpt)
    lines = [
        "### Lost work per failure (SIGKILL at step 25, FaultTolerancePlugin's ft_launcher restart)",
        "",
        "| checkpoints | resumed from | steps redone | redone time (s, x median step) | fault -> training again (s) "
        "| params = fault-free | <= 1 local interval |",
        "|---|---|---|---|---|---|---|",
        *lost_work_rows(summary),
        "",
        "### What a save costs the training step (sync vs async, AsyncCheckpointPlugin's settings)",
        "",
        "| save (medians of 5) | sync stall (s) | async: scheduling (s) | step time idle -> during the save (ms) "
        "| async extra time (s, % of sync) | <= 10 % |",
        "|---|---|---|---|---|---|",
        row,
        pretrain_async_row(summary),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(out, "checkpoint_rows.md"), "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
