"""job/log_lines.py is the one owner of the lines the package reads: each pattern matches its fixture line, every
pattern has one, the guard's ERE strings are the text core/sbatch/*.sh holds, and the readers use these objects."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from nemo_resiliency_plugins.job import log_lines as ll
from nemo_resiliency_plugins.tools.rehearse.watch import EVENT_PATTERNS

SBATCH = Path(ll.__file__).parent.parent / "core" / "sbatch"


def _patterns() -> dict[str, re.Pattern[str] | str]:
    return {
        name: value
        for name, value in vars(ll).items()
        if name.isupper() and name not in ("FIXTURES", "FULLMATCH") and isinstance(value, re.Pattern | str)
    }


def test_every_pattern_has_a_fixture_line_it_matches():
    patterns = _patterns()
    assert len(patterns) > 40
    assert set(patterns) == set(ll.FIXTURES), set(patterns) ^ set(ll.FIXTURES)
    for name, pattern in patterns.items():
        line = ll.FIXTURES[name]
        if isinstance(pattern, str):
            assert pattern in line, name
        elif name in ll.FULLMATCH:
            assert pattern.fullmatch(line), name
        else:
            assert pattern.search(line), name


def test_a_fixture_line_is_not_matched_by_the_wrong_pattern():
    # the patterns are specific: a workload line is no NVRx section timeout, a guard trace line is no guard line
    assert not ll.NVRX_SECTION.search(ll.FIXTURES["WORKLOAD_FINISHED"])
    assert not ll.GUARD.fullmatch("+ echo 'nemo-resiliency-plugins: x'")
    assert not ll.TORCH_GLOG.match("I1231 23:59:58.123000 4242 site-packages/torch/_dynamo/utils.py:1] warn")


def test_the_guard_holds_the_same_extended_regular_expressions():
    """core/sbatch/log_lines.sh assigns each NRP_RE_* exactly the text of log_lines.GUARD_ERE, no more, no fewer; the
    other blocks take every pattern from those variables (none writes a launcher-line ERE of its own)."""
    sh = (SBATCH / "log_lines.sh").read_text()
    assigned = dict(re.findall(r"^(NRP_RE_\w+)='([^']*)'$", sh, re.M))
    assert assigned == ll.GUARD_ERE
    for other in sorted(SBATCH.glob("*.sh")):
        if other.name != "log_lines.sh":
            assert not re.search(r"^\s*NRP_RE_\w+=", other.read_text(), re.M), other.name


def test_a_launcher_line_is_told_from_a_rank_line_that_quotes_it():
    launcher = "2026-12-05 10:01:02,345 [INFO] [nrp-node1] [workload:0(0) infra:0(4242)] launcher.py:1 Agent exits"
    assert ll.is_launcher_line(launcher) and ll.is_launcher_line("1: " + launcher)
    assert ll.is_launcher_line(ll.FIXTURES["TORCH_GLOG"]) and ll.is_launcher_line("srun: error: n1: task 1: Killed")
    for quoted in ("[default0]:" + launcher, "1: [default0]:[rank0]:" + launcher, "print: " + launcher):
        assert not ll.is_launcher_line(quoted), quoted


def test_the_readers_use_these_patterns_not_copies():
    from nemo_resiliency_plugins.tools.report import stacks

    owned = {id(value) for value in _patterns().values()}
    assert all(id(pattern) in owned for pattern, _ in EVENT_PATTERNS)
    assert stacks._PREFIXED is ll.TORCH_RANK_LINE
    package = Path(ll.__file__).parent.parent
    for path in [*(package / "tools" / "report").glob("*.py"), package / "tools" / "rehearse" / "watch.py"]:
        for literal in _regex_literals(path):
            for needle in ("has been open for", "FINISHED step=", "exitcode", "Assigned active rank", "srun: error"):
                assert needle not in literal, f"{path.name} restates {needle!r}"


#: The phrases of NVRx / torch / srun / workload / Megatron Bridge lines whose patterns log_lines owns (issue 51).
OWNED_PHRASES = (
    "has been open for",
    "FINISHED step=",
    "will restart",
    "RESUMED from step",
    "EXIT on signal",
    "EXIT on straggler",
    "INPROCESS iteration",
    "CHECKPOINT saved",
    "CHECKPOINT local",
    "START rank=",
    "exitcode",
    "exit code =",
    "Assigned active rank",
    "srun: error: (",
    "Training cycle #",
    "StragglerId",
    "Score=",
    "rdzv_endpoint",
    "scontrol show hostnames",
    "elapsed time per iteration",
    "iteration\\s+",
    "at iteration (",
    "successfully finished",
    "Store host waiting",
    "rendezvous has timed out",
    "Unable to create step",
    "min_nodes",
    "Fatal Python error",
)


def test_tests_and_benchmarks_take_the_patterns_from_log_lines():
    """No regex literal (an ``re.<function>`` argument) in tests/ or benchmarks/ restates an owned line's shape: they
    import log_lines' patterns (or ``log_lines.exact``). Kept, as its module docstring lists: fixtures of raw log
    text, and plain substring asserts (``in``, ``grep``) whose meaning is the text itself."""
    root = Path(__file__).resolve().parents[2]
    files = [*root.joinpath("tests").rglob("*.py"), *root.joinpath("benchmarks").rglob("*.py")]
    files = [f for f in files if "fixtures" not in f.parts and f.name != "test_log_lines.py"]
    assert len(files) > 50
    for path in files:
        for literal in _regex_literals(path, REGEX_TAKERS):
            for needle in OWNED_PHRASES:
                assert needle not in literal, f"{path.relative_to(root)} restates {needle!r}: {literal!r}"


def test_exact_fixes_a_patterns_groups():
    saved = ll.exact(ll.WORKLOAD_SAVED, 5)
    assert saved.search("[rank0] CHECKPOINT saved step=5") and not saved.search("[rank0] CHECKPOINT saved step=50")
    start = ll.exact(ll.WORKLOAD_START, None, None, 2)
    assert start.search("[rank1] START rank=1 world=2 restart=2").groups() == ("1", "2")
    assert not start.search("[rank1] START rank=1 world=2 restart=1")
    section = ll.exact(ll.NVRX_SECTION, "step")
    assert section.search(ll.FIXTURES["NVRX_SECTION"]) and not section.search("Section 'stepx' has been open for 1")
    node = ll.exact(ll.SRUN_ERROR, None, 1).search("srun: error: nrp-node2: task 1: Killed")
    assert node and node.group(1) == "nrp-node2"
    assert not ll.exact(ll.SRUN_ERROR, None, 1).search("srun: error: nrp-node2: task 12: Killed")


#: The benchmarks' own helpers that take a regex (gpu_proof.Job.first / all, pretrain_proof's lines / delta).
REGEX_TAKERS = frozenset({"first", "all", "lines", "delta", "_delta"})


def _regex_literals(path: Path, takers: frozenset[str] = frozenset()) -> list[str]:
    """The string literals (an f-string's literal parts too) passed to ``re.<function>(...)`` in one module, and
    every string argument of a call to one of ``takers`` (functions that take a regex)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "re":
            args = node.args[:1]
        elif name in takers:
            args = node.args
        else:
            continue
        for arg in args:
            parts = arg.values if isinstance(arg, ast.JoinedStr) else [arg]
            found += [part.value for part in parts if isinstance(part, ast.Constant) and isinstance(part.value, str)]
    return found


def test_torch_agent_lines_are_launcher_lines_whatever_the_path_torch_logs():
    """torch's glog line names its file as the logging module found it: a bare ``torch/distributed/...`` here, a
    ``.venv/lib/python3.12/site-packages/torch/...`` path in NeMo-Run's Docker container (a crash-loop job's report
    lost its restarts and exit codes on it), an absolute one elsewhere; only torch's distributed modules count."""
    rest = " 9 {}torch/distributed/elastic/agent/server/api.py:553]   restart_count=1"
    for prefix in ("", ".venv/lib/python3.12/site-packages/", "/" + "d/" * 80 + "site-packages/"):
        assert ll.TORCH_GLOG.match("I1207 17:51:30.644000" + rest.format(prefix)), prefix
        assert ll.is_launcher_line("I1207 17:51:30.644000" + rest.format(prefix)), prefix
    assert not ll.TORCH_GLOG.match("W1207 17:51:30.644000 9 .venv/lib/site-packages/torch/_dynamo/utils.py:1] x")
