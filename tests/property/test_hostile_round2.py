"""Issue 33, property-based: executor fields, plugin order, and the local-checkpoint guard over generated trees.

* every string and number field of every executor the package has rules for, through a real ``exp.add``: the
  plugins either accept, or refuse with one ResiliencyConfigError naming plugin and field, or NeMo-Run itself
  fails the same way without any plugin (its own error, not ours);
* every plugin set the recipes use (and the warm reserve with local checkpoints), in every order: one answer
  (the same refusal, or the same job), and the composed front programs, run for real, start the user's
  program exactly once with exactly its arguments;
* the guard over generated rank directories (damaged, good, truncated and earlier set-aside files, links in and
  out, FIFOs, sub-directories, a linked rank directory, files vanishing while it looks): it never raises, loses
  no byte, touches nothing outside its directory, and leaves no damaged file under a name NVRx would load.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import threading
import typing
import zipfile
from dataclasses import fields
from pathlib import Path

import nemo_run as run
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nemo_resiliency_plugins import (
    FaultTolerancePlugin,
    InProcessRestartPlugin,
    LocalCheckpointPlugin,
    PreemptionPlugin,
    ResiliencyConfigError,
)
from nemo_resiliency_plugins.core import executor_config
from nemo_resiliency_plugins.job import local_checkpoint_guard as guard
from nemo_resiliency_plugins.recipes import RECIPES
from tests.helpers import add_job
from tests.property.strategies import anything, each_class_of_anything
from tests.unit.test_hostile_round2 import run_in_own_group

SCHEDULE = ["checkpoint.save=/tmp/nrp-h2p/ck", "checkpoint.load=/tmp/nrp-h2p/ck", "checkpoint.save_interval=100"]
FAST = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROCESSES = settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)

# ------------------------------------------------------------------------------------------- executor fields


def _executors() -> dict[str, typing.Callable[..., typing.Any]]:
    """Every executor the base environment can build (Kubeflow and SkyPilot need the executors overlay; their
    rules are checked in tests/contract/test_executors_ft_sky_kubeflow.py)."""
    from tests.contract.test_executors_ft import dgxcloud, lepton

    def slurm(**kw):
        root = tempfile.mkdtemp(prefix="nrp-h2p-")
        base = {"account": "a", "partition": "p", "nodes": 1, "ntasks_per_node": 2, "time": "00:30:00"}
        return run.SlurmExecutor(**{**base, **kw}, tunnel=run.LocalTunnel(job_dir=root), packager=run.Packager())

    return {
        "LocalExecutor": lambda **kw: run.LocalExecutor(**{"ntasks_per_node": 2} | kw),
        "SlurmExecutor": slurm,
        "DockerExecutor": lambda **kw: run.DockerExecutor(**{"container_image": "x", "num_gpus": 0} | kw),
        "DGXCloudExecutor": lambda **kw: dgxcloud(**{"nodes": 1} | kw),
        "LeptonExecutor": lambda **kw: lepton(**kw),
    }


_PLAIN = (str, int, float, str | None, int | None, float | None)
EXECUTOR_FIELDS = [
    (kind, f.name)
    for kind in _executors()
    for f in fields(getattr(run, kind))
    if f.init and f.name != "experiment_id" and typing.get_type_hints(getattr(run, kind))[f.name] in _PLAIN
]
executor_value = st.one_of(
    anything,
    st.sampled_from(["$(touch NRP_PWNED)", "a b", "x\n", "00:30:00", "-1", "1e400", "nan", "", "/tmp/a b"]),
)


def _plugins() -> list:
    return [FaultTolerancePlugin(num_job_retries_on_failure=0), PreemptionPlugin()]


def _script() -> run.Script:
    return run.Script(path="/tmp/nrp-h2p/train.py", entrypoint="python", args=list(SCHEDULE))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.sampled_from(EXECUTOR_FIELDS), value=executor_value)
def test_every_executor_field_is_accepted_or_refused_by_name(where, value):
    kind, field = where
    make = _executors()[kind]
    try:
        executor = make(**{field: value})
    except Exception:  # noqa: BLE001 -- NeMo-Run's own constructor refused it: no plugin is involved
        return
    try:
        add_job(_script(), executor, _plugins())
    except ResiliencyConfigError as err:
        assert err.plugin in ("FaultTolerancePlugin", "PreemptionPlugin", "nemo-resiliency"), str(err)
        assert err.field or err.detail, str(err)
        assert "\n" not in (err.field or ""), str(err)
    except Exception as err:  # noqa: BLE001 -- only NeMo-Run's own failure, the same without any plugin
        with pytest.raises(type(err)):
            add_job(_script(), make(**{field: value}), [])


@pytest.mark.parametrize(
    ("kind", "holder", "key"),
    [
        ("DockerExecutor", "additional_kwargs", "stop_timeout"),
        ("DGXCloudExecutor", "custom_spec", "terminationGracePeriodSeconds"),
    ],
)
@FAST
@given(value=anything)
@each_class_of_anything
def test_a_grace_period_is_a_whole_number_of_seconds_or_refused_by_name(kind, holder, key, value):
    executor = _executors()[kind](**{holder: {key: value}})
    try:
        grace, _ = executor_config.platform_stop(executor, plugin="P")
    except ResiliencyConfigError as err:
        assert err.plugin == "P" and err.field == f"executor.{holder}[{key!r}]", str(err)
        return
    assert grace is not None and float(grace).is_integer() and 0 <= grace
    assert value is None or grace == value


# ------------------------------------------------------------------------------------------- plugin order

USER_PROGRAM = (
    "import json, os, sys\n"
    "chain = json.dumps(os.environ.get('NRP_FRONT_CHAIN'))\n"
    "print('NRP_USER_ARGV', json.dumps(sys.argv[1:]), chain, sep='\\t', flush=True)\n"
)
#: Every plugin set the recipes use, and the issue's one (a warm reserve with local checkpoints).
PLUGIN_SETS = {name: recipe.build for name, recipe in RECIPES.items()} | {
    "reserve+local": lambda: [
        InProcessRestartPlugin(granularity="rank", active_world_size=1),
        LocalCheckpointPlugin(non_persistent_local_ckpt_dir="/tmp/nrp-h2p/local", non_persistent_save_interval=10),
    ]
}
USER_ARGS = [*SCHEDULE, "-m", "x y", "--u", "-u", "a=${b}", "it's"]


def _compose(plugins: list) -> tuple[str, typing.Any]:
    task = run.Script(path="nrp_h2p_user", m=True, entrypoint="python", args=list(USER_ARGS))
    try:
        return "job", add_job(task, run.LocalExecutor(ntasks_per_node=2), plugins)
    except ResiliencyConfigError as err:
        return "refused", str(err)


@pytest.fixture(scope="module")
def user_dir():
    path = Path(tempfile.mkdtemp(prefix="nrp-h2p-user-"))
    (path / "nrp_h2p_user.py").write_text(USER_PROGRAM)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@PROCESSES
@given(data=st.data(), name=st.sampled_from(sorted(PLUGIN_SETS)))
def test_any_plugin_order_gives_one_answer_and_starts_the_users_program_once(data, name, user_dir):
    plugins = PLUGIN_SETS[name]()
    order = data.draw(st.permutations(range(len(plugins))), label="order")
    outcome, reference = _compose(copy.deepcopy(plugins))
    shuffled, result = _compose([copy.deepcopy(plugins[i]) for i in order])
    assert shuffled == outcome, (reference, result)
    if outcome == "refused":
        assert result == reference
        return
    a, b = reference, result
    assert (a.task.path, a.task.m) == (b.task.path, b.task.m)
    assert a.executor.env_vars.get(guard.CHAIN_ENV) == b.executor.env_vars.get(guard.CHAIN_ENV)
    assert sorted(a.task.args) == sorted(b.task.args) and b.task.args[: len(USER_ARGS)] == USER_ARGS
    # Run what a rank runs (the launcher left out), for real.
    head = ["-m", b.task.path] if b.task.m else [b.task.path]
    env = {**os.environ, **b.executor.env_vars, **(b.task.env or {}), "RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(user_dir), str(Path(__file__).resolve().parents[2])])
    env[guard.DIR_ENV] = str(user_dir / "local")  # the recipe's node-local directory is not on this machine
    done = run_in_own_group([sys.executable, "-u", *head, *b.task.args], cwd=user_dir, env=env, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = [line.split("\t") for line in done.stdout.splitlines() if line.startswith("NRP_USER_ARGV\t")]
    assert [(json.loads(argv), json.loads(chain)) for _, argv, chain in runs] == [(b.task.args, None)], done.stdout


# ------------------------------------------------------------------------------------------- the guard

KINDS = (
    "good",
    "damaged",
    "truncated",
    "empty",
    "link_out_damaged",
    "link_out_good",
    "link_in",
    "dangling",
    "dir",
    "fifo",
)


def _archive(fill: bytes) -> bytes:
    path = Path(tempfile.mktemp(prefix="nrp-h2p-zip-"))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data/0", fill * 512)
    data = path.read_bytes()
    path.unlink()
    return data


def _damage(data: bytes) -> bytes:
    out = bytearray(data)
    out[60] ^= 0xFF  # inside the member's bytes: its CRC no longer matches
    return bytes(out)


entry = st.tuples(
    st.integers(min_value=1, max_value=6),  # iteration
    st.integers(min_value=0, max_value=2),  # the rank in the name (own shard or a replica)
    st.sampled_from(["", ".unreadable", ".1.unreadable", ".dirty", "x"]),  # name suffix
    st.sampled_from(KINDS),
    st.booleans(),  # vanishes while the guard looks
)


def _snapshot(root: Path) -> dict[str, typing.Any]:
    """Every entry under ``root`` (not following links): name -> content digest, link target, or kind."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                found[os.path.relpath(path, root)] = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                found[os.path.relpath(path, root)] = ("file", hashlib.sha256(Path(path).read_bytes()).hexdigest())
            else:
                found[os.path.relpath(path, root)] = ("other", stat.S_IFMT(mode))
    return found


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(entry, max_size=12), linked_rank_dir=st.booleans())
def test_the_guard_loses_nothing_touches_nothing_outside_and_never_fails(entries, linked_rank_dir):
    base = Path(tempfile.mkdtemp(prefix="nrp-h2p-guard-"))
    try:
        outside = base / "outside"
        outside.mkdir()
        root = base / "local"
        root.mkdir()
        rank_dir = root / "0"
        if linked_rank_dir:
            (outside / "rankdir").mkdir()
            rank_dir.symlink_to(outside / "rankdir")
            target_dir = outside / "rankdir"
        else:
            rank_dir.mkdir()
            target_dir = rank_dir
        vanishing, damaged_names = [], set()
        for i, (iteration, rank, suffix, kind, vanishes) in enumerate(entries):
            name = f"iter_{iteration:07d}_{rank}_local.pt{suffix}"
            path = target_dir / name
            if os.path.lexists(path):
                continue
            good, bad = _archive(bytes([65 + i % 26])), _damage(_archive(bytes([97 + i % 26])))
            if kind in ("good", "damaged", "truncated", "empty"):
                data = {"good": good, "damaged": bad, "truncated": good[: len(good) // 2], "empty": b""}[kind]
                path.write_bytes(data)
            elif kind.startswith("link_out"):
                (outside / f"t{i}").write_bytes(bad if kind == "link_out_damaged" else good)
                path.symlink_to(outside / f"t{i}")
            elif kind == "link_in":
                (target_dir / f"plain{i}").write_bytes(bad)
                path.symlink_to(target_dir / f"plain{i}")
            elif kind == "dangling":
                path.symlink_to(outside / "nothing-here")
            elif kind == "dir":
                path.mkdir()
            else:
                os.mkfifo(path)
            if suffix == "" and kind in ("damaged", "truncated", "empty", "link_out_damaged", "link_in"):
                damaged_names.add(name)
            if vanishes and not linked_rank_dir and kind in ("good", "damaged", "truncated", "empty"):
                vanishing.append(path)
        before_outside = _snapshot(outside)
        before_files = _snapshot(target_dir)

        def vanish():
            for path in vanishing:
                path.unlink(missing_ok=True)

        thread = threading.Thread(target=vanish)
        thread.start()
        report = guard.check_rank_dir(str(rank_dir))  # must not raise
        thread.join()

        if linked_rank_dir:
            assert report.set_aside == [] and "symbolic link" in (report.not_checked or "")
            assert _snapshot(outside) == before_outside
            return
        assert report.not_checked is None
        assert _snapshot(outside) == before_outside  # nothing outside touched, link targets included
        after = _snapshot(target_dir)
        gone = {os.path.basename(p) for p in vanishing}
        # No data lost: every entry there before (but those removed on purpose) is still there, maybe renamed.
        leftover = list(after.values())
        for key, value in before_files.items():
            if key not in gone:
                assert value in leftover, f"{key} lost"
                leftover.remove(value)
        vanished = [before_files[name] for name in gone]
        for value in leftover:  # a vanishing file the guard had set aside before it went: kept, not invented
            assert value in vanished, f"unexpected entry {value}"
            vanished.remove(value)
        for name in damaged_names - gone:
            assert name not in after, f"{name} is damaged and still offered to NVRx"
        for old, value in before_files.items():
            if old.endswith(guard.SET_ASIDE_SUFFIX) and old not in gone:
                assert after.get(old) == value, f"{old} was set aside before and must keep its content"
    finally:
        shutil.rmtree(base, ignore_errors=True)
