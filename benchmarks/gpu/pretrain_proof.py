"""Real-pretrain proof: Megatron Bridge's own ``pretrain()`` under each plugin's settings, on one GPU.

Run on the GPU machine by ``pretrain_proof.sh``. Every job runs ``pretrain_entry.py`` (a tiny GPT through
``megatron.bridge.training.pretrain.pretrain`` + ``gpt_step.forward_step``), launched as the plugins'
``setup()`` says (``plugin_settings.json`` and ``ft_launcher.yaml``, written on the CPU machine by
``prepare.py``): the Hydra overrides, the environment, and for FaultTolerancePlugin NVRx's ``ft_launcher`` with
the flags NeMo-Run's ft_launcher component passes; the other plugins set no launcher, so their jobs run under
``torchrun`` as NeMo-Run's LocalExecutor would (InProcessRestartPlugin asks for torchrun itself).

Cases (``pretrain_proof.py OUT SETTINGS_DIR [case,case/case,...]``: "," cases run side by side, "/"
separates groups run one after the other; default: all, one at a time):

  base      FT, no fault: the reference loss curve and parameter hash
  kill      FT, rank SIGKILLed at step 25        -> ft_launcher restart -> Megatron Bridge loads the step-20 checkpoint
  hang      FT, rank hangs inside step 25         -> 'step' section timeout -> restart -> resume
  sigterm   PreemptionPlugin, SIGTERM at step 25  -> checkpoint -> exit 0; a second launch resumes and finishes
  calc      FT with calc_ft_timeouts: run 1 writes ft_state.json (stops at 40), run 2 loads it, hangs at step 55
  rerun     RerunStateMachinePlugin with error_injection_rate -> Megatron Core's exit code
  straggler StragglerDetectionPlugin, the step's GPU kernel 3x slower from step 120 -> Megatron Bridge's warning
  inprocess InProcessRestartPlugin, an exception raised at step 25 -> same process? (Megatron-Bridge#5187)
  async     FT + AsyncCheckpointPlugin, rank SIGKILLed at step 25 -> resumes from the async step-20 save; step time
            of the steps that saved, against base's synchronous saves
  local     FT + LocalCheckpointPlugin (local every 2 steps, persistent every 10), SIGKILL at step 25 -> resumes
            from the local step-24 checkpoint: 1 step redone instead of 5
  localbad  FT + LocalCheckpointPlugin: run 1 is SIGKILLed at step 35 with no restart left (local 34, persistent
            30), every local checkpoint file is then truncated, run 2: does Megatron Bridge fall back to the
            persistent step 30, or fail, or start from scratch? (LocalCheckpointPlugin(fallback_on_unreadable=False):
            Megatron Bridge's own behaviour)
  localguard  the same, with the plugin's default guard in front of each rank (``local_checkpoint_guard.py``,
            carried in SETTINGS_DIR): the damaged files are set aside and run 2 resumes from the persistent step 30

Writes ``<out>/pretrain_logs.tar.gz`` (one time-stamped log per job), ``summary.json`` and ``summary.md``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gpu_proof import Job  # noqa: E402

from nemo_resiliency_plugins.job import log_lines as ll  # noqa: E402

#: A detection as the launcher logs it (log_lines' patterns): NVRx's section timeout, torch's worker group state,
#: a worker's exit code (torch's agent, its error summary).
DETECTION = "|".join(
    p.pattern for p in (ll.NVRX_SECTION, ll.NVRX_WORKER_GROUP, ll.TORCH_EXITCODE, ll.TORCH_SUMMARY_EXITCODE)
)
EXITS = f"{ll.TORCH_EXITCODE.pattern}|{ll.TORCH_SUMMARY_EXITCODE.pattern}"
ENTRY = os.path.join("benchmarks", "gpu", "pretrain_entry.py")
ITERS = 40
FAULT_STEP = 25  # where kill, hang, sigterm, raise and the checkpoint cases strike: the step-20 save is the last
WORK = "/tmp/pretrain_proof"
ALL = (
    "base", "kill", "hang", "sigterm", "calc", "rerun", "straggler", "inprocess", "async", "local", "localbad",
    "localguard", "inprocesslong",
)  # fmt: skip
# Where each job saves and loads: the plugins that check autoresume saw a placeholder checkpoint.save (prepare.py)
# and set checkpoint.load to it; every job gets its own directory for both, as that setup would give it.
JOB_DIR_FIELDS = ("checkpoint.save=", "checkpoint.load=", "checkpoint.non_persistent_local_ckpt_dir=")
# LocalCheckpointPlugin's guard (local_checkpoint_guard.py): the chain it was prepared with, the old target var, its dir
GUARD_ENV = ("NRP_FRONT_CHAIN", "NRP_RUN_TARGET", "NRP_LOCAL_CKPT_DIR")


def _float(job: Job, pattern: str, group: int = 1) -> float | None:
    hit = job.first(pattern)
    return float(re.search(pattern, hit[1]).group(group)) if hit else None


def losses(job: Job) -> dict[int, float]:
    """step -> lm loss from the LOSS lines (a resumed run's later lines win)."""
    out: dict[int, float] = {}
    for _, line in job.all(r"LOSS step=\d+ lm_loss="):
        m = re.search(r"LOSS step=(\d+) lm_loss=([-0-9.naninf]+)", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def final(job: Job) -> tuple[int | None, str | None]:
    hit = job.first(ll.WORKLOAD_FINISHED_HASH.pattern)
    if not hit:
        return None, None
    m = ll.WORKLOAD_FINISHED_HASH.search(hit[1])
    return int(m.group(1)), m.group(2)


def job_args(plugin_args: list[str], save: str) -> list[str]:
    """The plugin's overrides with save, load (and a local checkpoint directory) pointed at this job's own."""
    kept = [a for a in plugin_args if not a.startswith(JOB_DIR_FIELDS)]
    local = any(a.startswith("checkpoint.non_persistent_ckpt_type=local") for a in plugin_args)
    extra = [f"checkpoint.non_persistent_local_ckpt_dir={save}_local"] if local else []
    return [*kept, f"checkpoint.save={save}", f"checkpoint.load={save}", *extra]


def step_times(job: Job) -> dict[int, float]:
    """step -> seconds since the previous LOSS line, first attempt only (a step that saved includes the save)."""
    out: dict[int, float] = {}
    prev: tuple[float, int] | None = None
    for t, line in job.all(r"LOSS step=\d+ lm_loss="):
        step = int(re.search(r"LOSS step=(\d+)", line).group(1))
        if prev is not None and step == prev[1] + 1 and step not in out:
            out[step] = round(t - prev[0], 4)
        prev = (t, step)
    return out


def save_cost(job: Job, saves: tuple[int, ...] = (20, 30)) -> dict:
    """Median step time, and the steps right after a persistent save (Megatron Bridge saves after step n, so the
    LOSS line of step n, printed by the next step, comes later by the save's stall)."""
    times = step_times(job)
    plain_steps = sorted(v for k, v in times.items() if k % 10 != 0 and k > 2)
    median = plain_steps[len(plain_steps) // 2] if plain_steps else None
    return {"median_step_s": median, "after_save_step_s": {str(k): times.get(k) for k in saves}}


def lines(job: Job, pattern: str, limit: int = 6) -> list[str]:
    return [f"[{t:8.3f}] {line}" for t, line in job.all(pattern)][:limit]


def delta(job: Job, start: str, end: str) -> float | None:
    a = job.first(start)
    if a is None:
        return None
    b = job.first(end, after=a[0])
    return None if b is None else round(b[0] - a[0], 2)


class Proof:
    def __init__(self, out: str, settings_dir: str) -> None:
        self.out = out
        with open(os.path.join(settings_dir, "plugin_settings.json")) as f:
            self.settings = json.load(f)
        self.yaml = os.path.abspath(os.path.join(settings_dir, "ft_launcher.yaml"))
        self.settings_dir = os.path.abspath(settings_dir)
        self.py = sys.executable
        self.jobs: list[Job] = []
        self.lock = threading.Lock()
        self.results: dict[str, dict] = {}
        self.base_env = {"NRP_DEVICE": "cuda", "NRP_STEP_TIME": "0.02", "NRP_FAULT_RANK": "0"}

    def _save(self, name: str, fresh: bool = True) -> str:
        path = os.path.join(WORK, name)
        if fresh:
            shutil.rmtree(path, ignore_errors=True)
        return path

    def _job(self, name: str, cmd: list[str], env: dict[str, str], timeout: float) -> Job:
        # coreutils timeout kills the whole process group (launcher and ranks), even a job that prints nothing.
        timeout = min(timeout, float(os.environ.get("PROOF_JOB_TIMEOUT", timeout)))
        return Job(name, ["timeout", "-s", "KILL", str(int(timeout)), *cmd], env, timeout=timeout + 5)

    def ft_job(
        self,
        name: str,
        key: str,
        save: str,
        iters: int,
        fault: dict[str, str],
        timeout: float,
        extra: str = "",
        program_first: bool = True,
    ) -> Job:
        """``extra``: a second plugin's settings key, its overrides and environment added (FT + a checkpoint plugin).
        A program that plugin puts in front of the task's own (``program_first`` in its settings) runs first, as
        the plugin set it up, unless ``program_first=False`` (the plugin switched off)."""
        ft = self.settings[key]
        lf = ft["launcher_fields"]
        more = self.settings[extra] if extra else {"args": [], "env": {}}
        env = dict(self.base_env, **fault, **ft["env"], **more["env"])
        env["PET_FT_CFG_PATH"] = self.yaml  # the plugin's NVRx file, carried here
        entry = ENTRY
        for var in GUARD_ENV:
            env.pop(var, None)
        if more.get("program_first") and program_first:
            entry = os.path.join(self.settings_dir, more["program_first"])
            # prepare.py's task ran another entry with other directories: this job's own, as job_args does
            chain = f"local_checkpoint_guard:path:{entry},task:path:{ENTRY}"
            env |= {"NRP_FRONT_CHAIN": chain, "NRP_LOCAL_CKPT_DIR": f"{save}_local"}
        cmd = [self.py, "-m", "nvidia_resiliency_ext.fault_tolerance.launcher"]
        cmd += ["--ft-workload_check_interval", str(lf["workload_check_interval"])]
        cmd += ["--ft-rank_termination_signal", lf["rank_termination_signal"], "--ft-log_level", lf["log_level"]]
        cmd += ["--max-restarts", str(lf["max_restarts"]), "--standalone", "--nnodes=1", "--nproc-per-node=1"]
        cmd += [entry, *job_args([*ft["args"], *more["args"]], save), f"train.train_iters={iters}"]
        return self._job(name, cmd, env, timeout)

    def torchrun_job(self, name: str, key: str, save: str, iters: int, fault: dict[str, str], timeout: float) -> Job:
        plugin = self.settings[key]
        env = dict(self.base_env, **fault, **plugin["env"])
        cmd = [self.py, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=1"]
        cmd += ["--max-restarts=0", ENTRY, *job_args(plugin["args"], save), f"train.train_iters={iters}"]
        return self._job(name, cmd, env, timeout)

    def run(self, job: Job) -> Job:
        job.run(None)
        self.jobs.append(job)
        with open(os.path.join(WORK, f"{job.name}.log"), "w") as f:
            f.write(job.text())
        return job

    def common(self, job: Job) -> dict:
        step, sha = final(job)
        loss = losses(job)
        out = {
            "rc": job.rc,
            "wall_s": round(job.wall_s, 2),
            "finished_step": step,
            "params_sha256": sha,
            # on_train_step_end fires before Megatron Bridge increments the step: LOSS step=39 is the 40th step.
            "final_loss": loss.get(step - 1) if step else None,
            "starts": lines(job, r"\] START pid="),
            "resume_lines": lines(job, r"successfully loaded checkpoint|will not load any checkpoints"),
            "fault_lines": lines(job, r"FAULT_INJECTED"),
            "launcher_restarts": len(job.all(ll.NVRX_WILL_RESTART.pattern)),
            "losses": {str(k): v for k, v in loss.items()},
        }
        return out

    def compare_with_base(self) -> None:
        """Loss at every step both runs logged, and the final parameters, against the fault-free run."""
        base = self.results.get("base", {})
        if not base.get("losses"):
            return

        def visit(r: dict) -> None:
            if "losses" in r and r is not base and r.get("finished_step"):
                steps = [s for s in r["losses"] if s in base["losses"]]
                diffs = [abs(r["losses"][s] - base["losses"][s]) for s in steps]
                r["max_abs_loss_diff_vs_base"] = max(diffs) if diffs else None
                r["steps_compared"] = len(steps)
                r["final_loss_diff_vs_base"] = (
                    r["final_loss"] - base["final_loss"] if r["final_loss"] is not None else None
                )
                r["params_equal_base"] = r["params_sha256"] == base["params_sha256"]
            for v in r.values():
                if isinstance(v, dict):
                    visit(v)

        for r in self.results.values():
            visit(r)

    # -- cases -------------------------------------------------------------------------------------------------
    def base(self) -> None:
        job = self.run(self.ft_job("base", "fault_tolerance", self._save("base"), ITERS, {}, 240))
        r = self.common(job)
        r["ft_lines"] = lines(job, r"FT: |Section|section", 8)
        r["save_cost"] = save_cost(job)
        self.results["base"] = r

    def _ft_fault(self, name: str, kind: str, extra: str = "") -> Job:
        fault = {"NRP_FAULT": kind, "NRP_FAULT_STEP": str(FAULT_STEP)}
        job = self.run(self.ft_job(name, "fault_tolerance", self._save(name), ITERS, fault, 300, extra))
        r = self.common(job)
        r["detection_lines"] = lines(job, DETECTION, 4)
        r["detect_s"] = delta(job, r"FAULT_INJECTED", DETECTION)
        r["fault_to_resumed_s"] = delta(job, r"FAULT_INJECTED", r"successfully loaded checkpoint")
        self.results[name] = r
        return job

    def async_(self) -> None:
        job = self._ft_fault("async", "kill", "async_checkpoint")
        r = self.results["async"]
        r["save_cost"] = save_cost(job)
        r["async_lines"] = lines(job, r"(?i)async|persistent.*worker|finaliz", 12)

    def local(self) -> None:
        job = self._ft_fault("local", "kill", "local_checkpoint")
        r = self.results["local"]
        r["local_lines"] = lines(job, r"(?i)local checkpoint|non.persistent|LocalCheckpointManager|loading local", 12)
        r["resumed_from_step"] = [int(m) for _, ln in job.all(r"TRAIN_START") for m in re.findall(r"step=(\d+)", ln)]
        r["steps_redone"] = FAULT_STEP - max(r["resumed_from_step"] or [0])

    def localbad(self, guarded: bool = False) -> None:
        name = "localguard" if guarded else "localbad"
        save = self._save(name)
        shutil.rmtree(f"{save}_local", ignore_errors=True)
        # Killed, not stopped by exit_interval: Megatron Bridge's exit path saves a persistent checkpoint (seen on
        # the device: run 2 then loaded the persistent step 35 and never read the local one).
        fault = {"NRP_FAULT": "kill", "NRP_FAULT_STEP": "35"}
        one = self.ft_job(f"{name}_1", "fault_tolerance", save, ITERS, fault, 240, "local_checkpoint", guarded)
        one.cmd[one.cmd.index("--max-restarts") + 1] = "0"
        one = self.run(one)
        truncated = []
        for root, _, files in os.walk(f"{save}_local"):
            for file in files:
                path = os.path.join(root, file)
                size = os.path.getsize(path)
                with open(path, "r+b") as f:
                    f.truncate(size // 2)
                truncated.append(f"{path} {size} -> {size // 2}")
        two = self.run(self.ft_job(f"{name}_2", "fault_tolerance", save, ITERS, {}, 300, "local_checkpoint", guarded))
        r = {"first": self.common(one), "truncated": truncated, "second": self.common(two)}
        r["second"]["load_lines"] = lines(
            two,
            r"(?i)load|local|Traceback|Error|TRAIN_START|iteration 0|from scratch|"
            + EXITS
            + "|"
            + ll.NVRX_WILL_RESTART.pattern,
            30,
        )
        r["second"]["guard_lines"] = lines(two, r"nrp-local-guard", 10)
        self.results[name] = r

    def localguard(self) -> None:
        self.localbad(guarded=True)

    def kill(self) -> None:
        self._ft_fault("kill", "kill")

    def hang(self) -> None:
        self._ft_fault("hang", "hang")

    def sigterm(self) -> None:
        save = self._save("sigterm")
        fault = {"NRP_FAULT": "sigterm", "NRP_FAULT_STEP": str(FAULT_STEP)}
        first = self.run(self.torchrun_job("sigterm_1", "preemption", save, ITERS, fault, 240))
        second = self.run(self.torchrun_job("sigterm_2", "preemption", save, ITERS, fault, 240))
        r = {"first": self.common(first), "second": self.common(second)}
        r["first"]["exit_lines"] = lines(
            first, r"(?i)SIGTERM|signal|Pretrain failed|SystemExit|saved checkpoint|successfully saved|" + EXITS, 10
        )
        self.results["sigterm"] = r

    def calc(self) -> None:
        save = self._save("calc")
        # Both runs have train_iters=70: Megatron Core refuses a checkpoint whose scheduler was built for another
        # number of iterations ("class input value 560 and checkpointvalue 320 for total number of iterations do
        # not match", seen on the device). Run 1 stops at 40 through Megatron Bridge's exit_interval.
        one = self.ft_job("calc_1", "fault_tolerance_calc", save, 70, {}, 240)
        one.cmd.append("train.exit_interval=40")
        one = self.run(one)
        state = os.path.join(save, "ft_state.json")
        ft_state = open(state).read() if os.path.exists(state) else None
        fault = {"NRP_FAULT": "hang", "NRP_FAULT_STEP": "55"}
        two = self.run(self.ft_job("calc_2", "fault_tolerance_calc", save, 70, fault, 300))
        r = {"first": self.common(one), "second": self.common(two), "ft_state_json_after_run_1": ft_state}
        r["first"]["ft_lines"] = lines(one, r"FT: ", 12)
        r["second"]["ft_lines"] = lines(two, r"FT: (loaded|initialized)", 6)
        r["second"]["detection_lines"] = lines(two, f"{ll.NVRX_SECTION.pattern}|{ll.NVRX_WORKER_GROUP.pattern}", 3)
        r["second"]["detect_s"] = delta(two, r"FAULT_INJECTED", DETECTION)
        self.results["calc"] = r

    def rerun(self) -> None:
        job = self.run(self.torchrun_job("rerun", "rerun", self._save("rerun"), ITERS, {}, 240))
        r = self.common(job)
        r["rerun_lines"] = lines(job, r"(?i)Injecting error|rerun|Exiting now|Saving a checkpoint|" + EXITS, 12)
        self.results["rerun"] = r

    def straggler(self) -> None:
        # Long enough for several 4 s reports after the slowdown (with 90 steps, slow from 40, only one report came,
        # and NVRx's first report scores 1.00 by construction).
        env = {"NRP_FAULT": "slow", "NRP_FAULT_STEP": "120", "NRP_STEP_TIME": "0.05"}
        job = self.run(self.torchrun_job("straggler", "straggler", self._save("straggler"), 240, env, 300))
        r = self.common(job)
        r["straggler_lines"] = lines(
            job,
            r"(?i)STRAGGLER|GPU (relative|individual) performance|NVRx straggler|cupti|"
            + ll.NVRX_STRAGGLER_SCORE.pattern,
            30,
        )
        r["slow_to_warning_s"] = delta(job, r"FAULT_INJECTED kind=slow", r"STRAGGLER DETECTION WARNING")
        self.results["straggler"] = r

    def inprocesslong(self) -> None:
        """Issue 32 item 6: in-process timeouts above the longest save (prepare.py's INPROCESS_LONG)."""
        self.inprocess("inprocesslong", "inprocess_restart_long")

    def inprocess(self, name: str = "inprocess", key: str = "inprocess_restart") -> None:
        fault = {"NRP_FAULT": "raise", "NRP_FAULT_STEP": str(FAULT_STEP)}
        job = self.run(self.torchrun_job(name, key, self._save(name), ITERS, fault, 300))
        r = self.common(job)
        r["train_starts"] = lines(job, r"TRAIN_START", 6)
        r["inprocess_lines"] = lines(
            job,
            r"(?i)inprocess|Pretrain failed|restart|Traceback|Error|iteration=|HealthCheck|abort|finaliz",
            40,
        )
        r["fault_to_resumed_s"] = delta(job, r"FAULT_INJECTED", r"successfully loaded checkpoint")
        r["save_lines"] = lines(job, r"(?i)saved checkpoint|saving checkpoint|SOFT_TIMEOUT|RankShouldRestart", 12)
        self.results[name] = r

    def bundle(self) -> None:
        """summary.json and the logs so far (after every case: a call cut short still brings them back)."""
        with self.lock:
            self._bundle()

    def _bundle(self) -> None:
        self.compare_with_base()
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(self.results, f, indent=2)
        with tarfile.open(os.path.join(self.out, "pretrain_logs.tar.gz"), "w:gz") as tar:
            for job in self.jobs:
                tar.add(os.path.join(WORK, f"{job.name}.log"), arcname=f"{job.name}.log")


def main(out: str, settings_dir: str, cases: str | None) -> int:
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    proof = Proof(out, settings_dir)
    # Groups separated by "/" run one after the other; the cases of a group run at the same time (each is its
    # own world-size-1 job on the one GPU: the tiny model leaves it nearly idle, and 16 cores host the ranks).
    groups = [g.split(",") for g in (cases or "/".join(ALL)).split("/")]

    def one(case: str) -> None:
        try:
            getattr(proof, "async_" if case == "async" else case)()
        finally:
            proof.bundle()

    try:
        for group in groups:
            with ThreadPoolExecutor(max_workers=len(group)) as pool:
                for future in [pool.submit(one, case) for case in group]:
                    future.result()
    finally:
        proof.bundle()
        print(json.dumps(proof.results, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
