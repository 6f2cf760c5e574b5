"""Job magics: ``%%gpugeek_run`` (a cell on every rank), ``%gpugeek_run --script``, ``%gpugeek_jobs``."""

from __future__ import annotations

import argparse
import keyword
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ..client import DEFAULT_JOBS_LIMIT
from ..errors import Phrase, SpecError
from ._common import chosen_pool, local_time, option_number, parse_options, pool_arguments, usage_errors
from ._rank_displays import RankDisplays
from ._rank_ipython import SHELL_FOR as RANK_IPYTHON
from ._rank_redraws import redrawn_in_place

# %load_ext imports this module and must stay instant: the jobs package (dask, cloudpickle), the
# widgets (ipywidgets, bokeh), pandas, the agent's client and the store are imported by the magic
# that first needs them, inside it
if TYPE_CHECKING:
    from ..jobs.pool_queue import QueueWait

_RUN_EXAMPLE = "--pool dev --timeout 600 -o losses"
_SCRIPT_EXAMPLE = "%gpugeek_run --script-path train.py -- --lr 3e-5"


def job_table(records: list[Any], positions: dict[str, int] | None = None) -> Any:
    """A pandas DataFrame with one row per job record, newest first; a queued job's status says its
    place in its pool's queue (``queued #1``: next to run, from ``positions``)."""

    import pandas as pd

    columns = [
        "id",
        "pool",
        "kind",
        "status",
        "ranks",
        "restarts",
        "started",
        "duration_s",
        "waited_s",
        "exit codes",
        "sizes",
        "failure",
        "sha256",
    ]
    rows = [
        {
            "id": r.id,
            "pool": r.pool_name,
            "kind": r.kind,
            "status": f"queued #{positions[r.id]}" if positions and r.id in positions else r.status.value,
            "ranks": r.ranks,
            "restarts": r.restarts,
            "started": local_time(r.started_at),
            "duration_s": round(r.ended_at - r.started_at, 3) if r.ended_at else None,
            "waited_s": round(r.waited_s, 1),
            "exit codes": r.rank_exits,
            "sizes": (r.summary or {}).get("sizes") or [r.ranks],
            "failure": r.failure_reason or "",
            "sha256": r.code_sha256[:12],
        }
        for r in records
    ]
    return pd.DataFrame(rows, columns=columns)


@magics_class
class JobMagics(Magics):
    @magic_arguments()
    @pool_arguments("to run on (default: the current pool)", positional=False)
    @argument(
        "--amp", default=None, help="run under torch.autocast: bf16 or fp16 (fp16 also gives gg.scaler a GradScaler)"
    )
    @argument(
        "--timeout",
        default=None,
        help="seconds; a job still running then is stopped, naming the ranks that had not arrived",
    )
    @argument(
        "--max-restarts", default="0", help="restart a failed job up to this many times (TORCHELASTIC_RESTART_COUNT)"
    )
    @argument(
        "--min-ranks",
        default=None,
        help="elastic: when workers are lost and not replaced, restart on the remaining ones if at least "
        "this many (with --max-restarts >= 1; resume from a checkpoint)",
    )
    @argument(
        "-o",
        "--out",
        dest="out",
        default=None,
        metavar="VAR",
        help="store the cell's last expression, a list by rank, in this variable",
    )
    @argument(
        "--output",
        default=None,
        metavar="MODE",
        help="how the ranks' output shows: grouped ([ranks 0-7] for lines alike), all ([rank N] each), or rank0 "
        "(default: GpugeekConfig.output_mode, grouped past 2 ranks); every rank's log: %%gpugeek_logs JOB",
    )
    @argument(
        "--ranks",
        default=None,
        help="run the cell on these ranks only, e.g. 0 or 0,2-3 (names kept on each rank, the warm group; "
        "no collectives)",
    )
    @argument("--rank0", action="store_true", help="give back rank 0's value only")
    @argument("--no-stream", action="store_true", help="show the ranks' output when the job ends, not live")
    @argument(
        "--detach",
        action="store_true",
        help="start the job on a kept pool and return at once; follow it with %%gpugeek_attach JOB",
    )
    @argument(
        "--no-wait",
        action="store_true",
        help="fail at once, naming the job that holds the pool, instead of waiting in the pool's queue",
    )
    @argument("--monitor", action="store_true", help="show the live utilization panel of the pool under the cell")
    @argument(
        "--track",
        nargs="?",
        const=True,
        default=None,
        metavar="URI",
        help="make this job an MLflow run: at GPUGEEK_MLFLOW_URI, or at URI (e.g. --track http://127.0.0.1:5000)",
    )
    @argument("--no-track", action="store_true", help="no MLflow run for this job, though GPUGEEK_MLFLOW_URI is set")
    @argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a variable in every rank for this job only (repeatable), e.g. --env NCCL_DEBUG=INFO",
    )
    @argument("--script-path", default=None, help="line magic: run this torchrun-ready script instead of a cell")
    @argument("--script", dest="script_path", default=None, help=argparse.SUPPRESS)  # the old name, still accepted
    @argument("args", nargs="*", metavar="ARGS", help="after --: the script's arguments")
    @line_cell_magic
    def gpugeek_run(self, line: str, cell: str | None = None) -> Any:
        """Example::

            In [1]: %%gpugeek_run
               ...: print(rank, world_size)
            [rank 0] 0 2
            [rank 1] 1 2

        Run a cell, or a script, on every worker of a pool: one rank per worker, torchrun's
        environment. The options a script run shares with ``Job.run(...)`` have its keywords' names.

        More examples::

            In [2]: %%gpugeek_run --pool dev --amp bf16 --timeout 600 --max-restarts 2 -o losses
               ...: model = gg.ddp(Net())
               ...: for x, y in gg.shard(dataset, batch_size=64):
               ...:     ...
               ...: loss.item()
            In [3]: losses
            Out[3]: [0.29, 0.29]

            In [4]: %gpugeek_run --script-path train.py --env HF_HOME=/data/hf -- --lr 3e-5

            In [5]: %%gpugeek_run --env NCCL_DEBUG=INFO --env WANDB_MODE=offline
               ...: print(os.environ["WANDB_MODE"])
            [rank 0] offline
            [rank 1] offline

        A pool runs one job at a time, whichever notebook sends it: on a busy pool the cell waits
        its turn, and says so in one line updated in place (``pool 'dev' is busy: job-... is
        waiting for job-1a2b3c4da910 (notebook train.ipynb, running 12 s); next in line``); an
        interrupt takes it out of the queue. ``--no-wait`` fails at once instead, naming the job
        that holds the pool. ``--timeout`` counts from the start of the run, not of the wait.

        The cell sees ``rank``, ``world_size``, ``device``, ``dist`` (torch.distributed) and ``gg``
        (``gg.ddp``, ``gg.fsdp``, ``gg.shard``, ``gg.grad_checkpoint``, ``gg.checkpoint``,
        ``gg.scaler``); the notebook's functions, classes and variables it uses are sent along, and
        its modules imported again. Output appears live as ``[rank N] ...``; a failing rank's
        traceback is shown and raised here, and the pool stays usable.
        """
        from ..jobs import run_cell, run_script
        from ..jobs.output import output_writer
        from ..jobs.request import parse_ranks

        args = parse_options(self.gpugeek_run, line, _RUN_EXAMPLE)
        script_args = list(args.args)
        if script_args[:1] == ["--"]:
            script_args = script_args[1:]
        if cell is None and args.script_path is None:
            raise UsageError(
                f"%gpugeek_run as a line magic runs a script (e.g. {_SCRIPT_EXAMPLE}); "
                "for notebook code use the cell magic %%gpugeek_run"
            )
        if cell is not None and args.script_path is not None:
            raise UsageError(f"{_script_flag_in(line)} is for the line magic (e.g. {_SCRIPT_EXAMPLE})")
        if script_args and args.script_path is None:
            raise UsageError(f"unexpected arguments {' '.join(script_args)!r} (e.g. %%gpugeek_run {_RUN_EXAMPLE})")
        shell = self.shell
        assert shell is not None
        if cell is not None:
            cell = ipython_transformed(shell, cell)
        with usage_errors():
            pool = self._pool(args.pool)
            timeout = option_number(args.timeout, "timeout", 600)
            max_restarts = option_number(args.max_restarts, "max_restarts", 2, integer=True)
            min_ranks = option_number(args.min_ranks, "min_ranks", 2, integer=True)
            if args.out is not None and (not args.out.isidentifier() or keyword.iskeyword(args.out)):
                raise SpecError(
                    Phrase("{field} needs {rule}, got {value} (e.g. {example})"),
                    field="out",
                    value=args.out,
                    rule="a variable name",
                    example="losses",
                )
            mode = _output_mode(args.output, pool)
            ranks = parse_ranks(args.ranks)
            if ranks is not None and args.script_path is not None:
                raise UsageError("--ranks is for cells: a script runs on every rank (e.g. %%gpugeek_run --ranks 0)")
            writer = RankDisplays(redrawn_in_place(output_writer(mode, _world_size(pool), ranks=ranks)), mode)
            from ..widgets.progress import progress_display

            progress = progress_display(mode, _world_size(pool))
            from ..widgets.metrics_chart import metrics_display

            charts = metrics_display(_world_size(pool))  # made at the first gg.log values only
            if args.monitor:
                from ..widgets.monitor import show_monitor

                show_monitor(pool)  # keeps updating from its own thread while the job runs
            if args.detach:
                return self._detach(args, pool, cell, script_args, timeout, max_restarts, min_ranks, ranks)
            options = {
                "track": _track(args),
                "env": _job_env(args.env),
                "timeout": timeout,
                "max_restarts": max_restarts,
                "min_ranks": min_ranks,
                "stream": not args.no_stream,
                "on_output": writer,
                "on_progress": progress,
                "on_metrics": charts,
                "on_notice": _notice,
                "wait": not args.no_wait,
                "on_wait": _WaitDisplay(),
            }
            try:
                if args.script_path is not None:
                    result = run_script(pool, args.script_path, script_args, **options)
                else:
                    assert cell is not None
                    result = run_cell(
                        pool,
                        cell,
                        shell.user_ns,
                        hidden=set(shell.user_ns_hidden),
                        amp=args.amp,
                        rank0=args.rank0,
                        ranks=ranks,
                        ipython=RANK_IPYTHON,
                        **options,
                    )
            finally:
                writer.close()  # what grouping still held back
        result.raise_for_status()  # outside usage_errors: the rank's traceback is the message
        if cell is None:
            return None
        value = result.values[0] if args.rank0 else result.values
        if args.out is not None:
            shell.user_ns[args.out] = value
            return None
        if not _ends_with_expression(cell) or all(v is None for v in result.values):
            return None  # like a cell ending in a call that returns None: nothing to show
        formatter, ranks_in_order = shell.display_formatter, [r.rank for r in result.ranks]
        if (
            not args.rank0
            and formatter is not None
            and writer.show_values(ranks_in_order, result.values, formatter.format)
        ):
            return None  # each rank's DataFrame, figure, ... shown as itself under its label
        return value

    def _detach(
        self,
        args: Any,
        pool: Any,
        cell: str | None,
        script_args: list[str],
        timeout: float | None,
        max_restarts: int,
        min_ranks: int | None,
        ranks: tuple[int, ...] | None,
    ) -> None:
        from ..detached import keep_pool, submit_request
        from ..jobs import cell_request, script_request

        if args.out is not None:
            raise UsageError(
                f"--detach returns before the job's values exist, so -o {args.out} has nothing to store; "
                "take them later with gpugeek_jupyter.job('JOB').result().values (e.g. %%gpugeek_run --detach)"
            )
        shell = self.shell
        assert shell is not None
        common: dict[str, Any] = {
            "timeout": timeout,
            "max_restarts": max_restarts,
            "min_ranks": min_ranks,
            "env": _job_env(args.env),
            "track": _track(args),
        }
        if args.script_path is not None:
            request = script_request(args.script_path, script_args, **common)
        else:
            assert cell is not None
            request = cell_request(
                cell,
                shell.user_ns,
                hidden=set(shell.user_ns_hidden),
                amp=args.amp,
                rank0=args.rank0,
                ranks=ranks,
                ipython=RANK_IPYTHON,
                **common,
            )
        pool, kept_now = keep_pool(pool)
        if kept_now is not None:
            print(f"[gpugeek] {kept_now}")
        handle = submit_request(pool, request)
        print(
            f"[gpugeek] {handle.id} runs on pool '{pool.name}', detached: follow it with "
            f"%gpugeek_attach {handle.id}; its values: gpugeek_jupyter.job('{handle.id}').result().values"
        )
        return None

    @magic_arguments()
    @argument("job", nargs="?", default=None, help="the job's id, as %%gpugeek_jobs lists it")
    @argument("--output", default=None, help="grouped (default past 2 ranks), all, or rank0, as for %%gpugeek_run")
    @argument("-o", "--out", default=None, metavar="VAR", help="store every rank's value in VAR once the job has ended")
    @line_magic
    def gpugeek_attach(self, line: str) -> None:
        """Example::

            In [1]: %gpugeek_attach job-1a2b3c4da910
            [ranks 0-1] epoch 3: loss 0.41
            ...
            [gpugeek] job-1a2b3c4da910 succeeded

        Show a job's output so far, as its cell would have (grouped lines, progress bars at their
        state), then follow it live until it ends; from any kernel of the user, also after the
        kernel that submitted it died. Interrupting detaches: the job goes on. ``-o VAR`` stores
        every rank's value in ``VAR`` once it has ended (``gpugeek_jupyter.job(ID).result().values``).
        """
        from ..detached import job
        from ..jobs.output import output_writer
        from ..widgets.progress import progress_display

        args = parse_options(self.gpugeek_attach, line, "job-1a2b3c4da910")
        if args.job is None:
            raise UsageError("name the job to attach to (e.g. %gpugeek_attach job-1a2b3c4da910; see %gpugeek_jobs)")
        with usage_errors():
            if args.out is not None and (not args.out.isidentifier() or keyword.iskeyword(args.out)):
                raise SpecError(field="out", value=args.out, rule="a variable name", example="losses")
            handle = job(args.job)
            record = handle.record()
            mode = _output_mode(args.output, None, record.ranks)
        writer = RankDisplays(redrawn_in_place(output_writer(mode, record.ranks)), mode)
        progress = progress_display(mode, record.ranks)
        ended: dict[str, Any] | None = None
        try:
            for event in handle.events():
                kind = event["kind"]
                if kind == "out":
                    writer(event["rank"], event["stream"], event["text"])
                elif kind == "progress":
                    progress(event["rank"], event["state"])
                elif kind == "notice":
                    _notice(event["text"])
                elif kind == "end":
                    ended = event
        except KeyboardInterrupt:
            writer.close()
            print(f"[gpugeek] detached from {handle.id}: it goes on (attach again with %gpugeek_attach {handle.id})")
            return None
        writer.close()
        final = handle.record()
        status = ended["status"] if ended else final.status.value
        failure = ended["failure"] if ended else final.failure_reason
        if ended and ended.get("traceback") and ended.get("failed_rank") is not None:
            from ..jobs.result import labelled_traceback  # as the live cell shows it (JobResult.report)

            print("\n".join(labelled_traceback(ended["failed_rank"], ended["traceback"])), file=sys.stderr)
        print(f"[gpugeek] {handle.id} {status}" + (f": {failure}" if failure else ""))
        if args.out is not None:
            from ..detached.results import values_of

            with usage_errors():
                values = values_of(handle.result())
            assert self.shell is not None
            self.shell.user_ns[args.out] = values
        return None

    @magic_arguments()
    @argument("job", nargs="?", default=None, help="the job's id, as %%gpugeek_jobs lists it")
    @line_magic
    def gpugeek_cancel(self, line: str) -> None:
        """Example::

            In [1]: %gpugeek_cancel job-1a2b3c4da910
            [gpugeek] job-1a2b3c4da910 cancelled: cancelled from notebook b.ipynb

        Stop a running or queued job, whichever notebook, script or detached agent of the user runs
        it: its ranks stop as when its own cell is interrupted (the cell there ends ``cancelled``,
        with the reason), a queued job leaves its pool's queue. Returns once the job has ended.
        """
        from ..detached import job
        from ..jobs.pool_queue import this_submitter

        args = parse_options(self.gpugeek_cancel, line, "job-1a2b3c4da910")
        if args.job is None:
            raise UsageError("name the job to cancel (e.g. %gpugeek_cancel job-1a2b3c4da910; see %gpugeek_jobs)")
        with usage_errors():
            handle = job(args.job)
            if handle.record().status.is_final:
                print(f"[gpugeek] {handle.id} has already ended ({handle.status()})")
                return
            handle.cancel(f"cancelled from {this_submitter().label}")
            final = handle.record()
        failure = f": {final.failure_reason}" if final.failure_reason else ""
        print(f"[gpugeek] {handle.id} {final.status.value}{failure}")

    @magic_arguments()
    @argument("target", nargs="?", default=None, help="a job's id, or a checkpoint's path or URL")
    @line_magic
    def gpugeek_lineage(self, line: str) -> None:
        """Example::

            In [1]: %gpugeek_lineage /ckpt/step-000000006.pt
            job-b2c3d4e50178 (succeeded, pool dev)
              resumed from /ckpt/step-000000003.pt (step 3, written by job-a1b2c3d49a01)
                job-a1b2c3d49a01 (succeeded, pool dev)
                  read /data/train.csv (file, 1.2 MB, sha256 6b1d9b4b62e8)
                  wrote /ckpt/step-000000003.pt (step 3)
              wrote /ckpt/step-000000006.pt (step 6)

        Where a job or a checkpoint came from: the data each job read (``gg.dataset``), the
        checkpoint it resumed from and the job that wrote that, back to the data
        (``gpugeek_jupyter.lineage(target)``).
        """
        from ..jobs.lineage import lineage

        args = parse_options(self.gpugeek_lineage, line, "job-1a2b3c4da910")
        if args.target is None:
            raise UsageError("name a job or a checkpoint (e.g. %gpugeek_lineage job-1a2b3c4da910; see %gpugeek_jobs)")
        with usage_errors():
            print(lineage(args.target))

    @magic_arguments()
    @pool_arguments("whose jobs to list (default: every pool's)")
    @argument("--limit", default=str(DEFAULT_JOBS_LIMIT), help="how many, newest first")
    @line_magic
    def gpugeek_jobs(self, line: str) -> Any:
        """Example::

            In [1]: %gpugeek_jobs dev --limit 2
            Out[1]:
                         id pool  kind     status  ranks  restarts              started  duration_s exit codes ...
            0  job-8c41f2d0b7fa  dev  cell  succeeded      2         0  2026-11-30 09:14:41       0.012     [0, 0] ...
            1  job-3f2a9c1d8c19  dev  cell     failed      2         0  2026-11-30 09:14:02       0.020     [0, 1] ...

        The job records of the registry, newest first, from every kernel: of pool NAME (or
        ``--pool NAME``), else of every pool.
        """
        from ..store import get_registry

        args = parse_options(self.gpugeek_jobs, line, "dev --limit 20")
        pool = chosen_pool(args, "gpugeek_jobs", "dev --limit 20")
        with usage_errors():
            limit = option_number(args.limit, "limit", 20, integer=True)
            if limit < 1:
                raise SpecError(field="limit", value=args.limit, rule="a whole number >= 1", example=20)
            registry = get_registry()
            pool_id = registry.latest_pool(pool).id if pool else None
            jobs = registry.list_jobs(pool_id=pool_id, limit=limit)
            return job_table(jobs, registry.queue_positions([j.pool_id for j in jobs if j.status.value == "queued"]))

    @magic_arguments()
    @argument("names", nargs="*", help="the notebook's variables to send")
    @pool_arguments("to use (default: the current one)", positional=False)
    @argument("--ranks", default=None, help="these ranks only, e.g. 0,2-3 (default: every rank)")
    @line_magic
    def gpugeek_push(self, line: str) -> None:
        """Example::

            In [1]: %gpugeek_push model lr
            In [2]: %%gpugeek_run
               ...: lr
            Out[2]: [0.0003, 0.0003]

        Bind these notebook variables on the ranks now, replacing what the ranks hold under those
        names (ipyparallel's ``push``): sent even when unchanged since the last cell, a model's
        tensors with their data. Without it, a cell sends a notebook name only when the notebook
        changed it since it last sent it, and the ranks otherwise keep their own (the namespace
        rule). In Python: ``gpugeek_jupyter.push({"model": model, "lr": lr})``.
        """
        from ..jobs import push
        from ..jobs.cell import RANK_NAMES

        args = parse_options(self.gpugeek_push, line, "model lr")
        shell = self.shell
        assert shell is not None
        missing = [n for n in args.names if n not in shell.user_ns]
        if not args.names or missing:
            what = f"{missing[0]!r} is not a variable of this notebook" if missing else "name the variables"
            raise UsageError(f"%gpugeek_push: {what} (e.g. %gpugeek_push model lr)")
        taken = [n for n in args.names if n in RANK_NAMES]
        if taken:
            raise UsageError(
                f"%gpugeek_push: {taken[0]!r} is a name each rank sets itself ({', '.join(sorted(RANK_NAMES))}): "
                "push a variable of yours (e.g. %gpugeek_push model lr)"
            )
        with usage_errors():
            pool = self._pool(args.pool)
            values = {name: shell.user_ns[name] for name in args.names}
            push(pool, values, ranks=args.ranks, on_notice=_notice).raise_for_status()

    @magic_arguments()
    @argument("name", nargs="?", default=None, help="the ranks' variable to fetch")
    @argument("--rank", default=None, help="the rank to fetch it from (default: 0)")
    @pool_arguments("to use (default: the current one)", positional=False)
    @argument("-o", "--out", default=None, help="store it in this notebook variable (default: the same name)")
    @line_magic
    def gpugeek_pull(self, line: str) -> None:
        """Example::

            In [1]: %gpugeek_pull losses --rank 1
            In [2]: losses[-1]
            Out[2]: 0.412

        Fetch a variable from a rank into the notebook (ipyparallel's ``pull``), under the same name
        or ``-o``'s; the notebook's own value is not sent. Every rank's at once: ``%%gpugeek_run -o
        all_losses`` with the cell ``losses``. In Python: ``gpugeek_jupyter.pull("losses", rank=1)``.
        """
        from ..jobs import pull

        args = parse_options(self.gpugeek_pull, line, "losses --rank 1")
        shell = self.shell
        assert shell is not None
        if not args.name:
            raise UsageError("%gpugeek_pull needs the variable's name (e.g. %gpugeek_pull losses --rank 1)")
        if not args.name.isidentifier() or keyword.iskeyword(args.name):
            raise UsageError(f"%gpugeek_pull takes a variable name, got {args.name!r} (e.g. %gpugeek_pull losses)")
        with usage_errors():
            rank = option_number(args.rank, "rank", 1, integer=True)
            target = args.out or args.name
            if not target.isidentifier() or keyword.iskeyword(target):
                raise SpecError(field="out", value=target, rule="a variable name", example="losses")
            pool = self._pool(args.pool)
            value = pull(pool, args.name, rank=rank or 0, on_notice=_notice)
        shell.user_ns[target] = value

    @magic_arguments()
    @argument("job", nargs="?", default=None, help="the job's id, as %%gpugeek_jobs lists it")
    @argument("--rank", default=None, help="this rank's log only (default: every rank's, one after another)")
    @line_magic
    def gpugeek_logs(self, line: str) -> None:
        """Example::

            In [1]: %gpugeek_logs job-3f2a9c7b8c19 --rank 1
            epoch 0: loss 0.91
            epoch 1: loss 0.48

        Every rank's full output of a job, as it ran (whatever ``--output`` showed), from the log
        kept on disk for each rank: its first and last halves when it grew past
        ``GpugeekConfig.job_log_bytes``; the newest ``job_logs_keep`` jobs are kept. In Python:
        ``result.logs(rank)``.
        """
        from ..jobs.logs import JobLogs, logs_root
        from ..store import get_registry

        args = parse_options(self.gpugeek_logs, line, "job-3f2a9c7b8c19 --rank 1")
        if not args.job:
            raise UsageError(
                "%gpugeek_logs needs a job id (e.g. %gpugeek_logs job-3f2a9c7b8c19 --rank 1; %gpugeek_jobs lists them)"
            )
        with usage_errors():
            rank = option_number(args.rank, "rank", 1, integer=True)
            record = get_registry().job(args.job)
        ranks = JobLogs.ranks(record.id)
        if not ranks:
            raise UsageError(
                f"job {record.id!r} has no logs in {str(logs_root())!r} (kept there for the newest jobs only)"
            )
        if rank is not None and rank not in ranks:
            raise UsageError(
                f"--rank {args.rank!r}: job {record.id!r} has logs of ranks {', '.join(map(str, ranks))} "
                f"(e.g. --rank {ranks[0]})"
            )
        for each in [rank] if rank is not None else ranks:
            text = JobLogs.read(record.id, each)
            if rank is None:
                print(f"--- rank {each} ---")
            print(text, end="" if text.endswith("\n") or not text else "\n")

    def _pool(self, name: str | None) -> Any:
        from ..runtime import get_pool_manager

        manager = get_pool_manager()
        if name:
            return manager.get(name)
        if manager.current is None:
            raise SpecError(
                "no pool to run on: launch one (e.g. %gpugeek_launch --gpu-type cpu --count 2 --name dev) "
                "or name one with --pool dev",
                field="pool",
            )
        return manager.current


def _output_mode(mode: str | None, pool: Any, world_size: int | None = None) -> str:
    """``--output``'s mode; a variable name there (its meaning before ``-o``/``--out``) is named."""
    from ..jobs.output import OUTPUT_MODES, resolve_output_mode

    if mode is not None and mode.lower() not in (*OUTPUT_MODES, "auto") and mode.isidentifier():
        raise UsageError(
            f"--output takes grouped, all or rank0, got {mode!r} (e.g. --output grouped); "
            f"to keep the cell's value in a variable use -o {mode}"
        )
    return resolve_output_mode(mode, world_size if world_size is not None else _world_size(pool))


def _world_size(pool: Any) -> int:
    return max(1, int(pool.spec.count))


def _script_flag_in(line: str) -> str:
    """The spelling of the script option that ``line`` used (``--script``, its old name, is still accepted)."""
    words = line.split()
    return "--script" if any(w == "--script" or w.startswith("--script=") for w in words) else "--script-path"


def _job_env(assignments: list[str]) -> dict[str, str]:
    """``--env NAME=VALUE`` options as a dict; a bad one is a JobEnvError naming it (phrased by
    ``usage_errors``: ``--env 'RANK': torchrun's own variables ...``)."""
    if not assignments:  # the common case, on every cell's way
        return {}
    from ..jobs.job_env import check_job_env, parse_assignments

    return check_job_env(parse_assignments(assignments))


def _track(args: Any) -> bool | str | None:
    """``--track [URI]`` / ``--no-track`` as the job's ``track`` option."""
    if args.no_track and args.track is not None:
        raise UsageError("--track and --no-track ask for opposite things: give one (e.g. %%gpugeek_run --track)")
    return False if args.no_track else args.track


# what IPython's static transformations change: magics, !commands and their assignments, help (x?),
# autocall escapes, prompts and a common indent pasted along; any other cell is plain Python already
_IPYTHON_SYNTAX = re.compile(r"^[ \t]*(?:[%!?/,;]|>>>|In \[\d*\]:)|\?[ \t]*$|=[ \t]*[%!]|\A[ \t]", re.MULTILINE)


def ipython_transformed(shell: Any, cell: str) -> str:
    """``cell`` as IPython runs it: its magics and ``!commands`` as calls of ``get_ipython()``, which
    the ranks answer with an IPython shell over their namespace (``RANK_IPYTHON``)."""
    if _IPYTHON_SYNTAX.search(cell) is None:
        return cell
    transformed: str = shell.input_transformer_manager.transform_cell(cell)
    return transformed


def _ends_with_expression(cell: str) -> bool:
    from ..jobs.cell_source import shows_value

    return shows_value(cell)


class _WaitDisplay:
    """The pool's queue in the cell: one line while the job waits, updated in place."""

    def __init__(self) -> None:
        self.handle: Any = None
        self.last = ""
        self.since = 0.0

    def __call__(self, wait: QueueWait | None) -> None:
        from IPython.display import Pretty, display

        if wait is None:
            if self.handle is not None:
                self.handle.update(
                    Pretty(f"[gpugeek] {self.last}: running after {time.monotonic() - self.since:.0f} s")
                )
            return
        self.last = f"pool '{wait.pool}' was busy"
        text = Pretty(f"[gpugeek] {wait.describe()} (waited {wait.waited_s:.0f} s)")
        if self.handle is None:
            self.since = time.monotonic() - wait.waited_s
            self.handle = display(text, display_id=True)
        else:
            self.handle.update(text)


def _notice(message: str) -> None:
    print(f"[gpugeek] {message}", file=sys.stderr, flush=True)
