"""``%gpugeek_schedule`` / ``%%gpugeek_schedule`` (a script or a cell run every day, or by cron, by the
user's agent) and ``%gpugeek_schedules`` (list them; pause, resume or delete one): thin over
:mod:`gpugeek_jupyter.schedules`."""

from __future__ import annotations

import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ._common import local_time, option_number, parse_options, usage_errors

_SCHEDULE_EXAMPLE = "--every 1d --gpu-type cpu --count 2"
_SCRIPT_EXAMPLE = "%gpugeek_schedule --script-path train.py --every 1d --gpu-type cpu --count 2"
_SCHEDULES_EXAMPLE = "pause daily"
ACTIONS = ("pause", "resume", "delete")


@magics_class
class ScheduleMagics(Magics):
    @magic_arguments()
    @argument(
        "--every", default=None, help="run at this interval from now: 10s, 30m, 2h, 1d, 1w (units combine: 1h30m)"
    )
    @argument("--cron", default=None, help='run by this cron expression, e.g. "0 2 * * *" (02:00 daily)')
    @argument("--timezone", default="UTC", help="the cron expression's time zone, e.g. Europe/Berlin (default UTC)")
    @argument(
        "--resume",
        default="latest",
        help="latest (default): each run continues from the newest checkpoint of the runs before; none: afresh",
    )
    @argument("--pool", default=None, metavar="NAME", help="run on this kept pool (else a pool is made for each run)")
    @argument("--gpu-type", default=None, help="the pool made for each run: GPU type (default cpu)")
    @argument("--count", default=None, help="the pool made for each run: how many GPUs (cpu: workers)")
    @argument("--backend", default=None, help="the pool made for each run: local (default), kubernetes or slurm")
    @argument("--budget", default=None, help="USD each run's pool may spend before it stops")
    @argument("--spot-fraction", default=None, help="share of each run's workers on spot prices, 0..1")
    @argument("--walltime", default=None, help="time limit of each run's Slurm jobs, e.g. 04:00:00")
    @argument("--name", default=None, help="the schedule's name (lowercase, digits, '-')")
    @argument(
        "--overlap", default="skip", help="a run still going at the next occurrence: skip (default), queue, replace"
    )
    @argument("--max-failures", default="3", help="pause the schedule after this many failed runs in a row (default 3)")
    @argument(
        "--checkpoints", default=None, help="the runs' checkpoint folder or URL (default: one beside the registry)"
    )
    @argument("--timeout", default=None, help="seconds each run may take")
    @argument("--max-restarts", default="0", help="restarts of each run's ranks, as for %%gpugeek_run")
    @argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a variable in every rank of each run (repeatable), e.g. --env NCCL_DEBUG=INFO",
    )
    @argument("--script-path", default=None, help="line magic: schedule this torchrun-ready script")
    @argument("args", nargs="*", metavar="ARGS", help="after --: the script's arguments")
    @line_cell_magic
    def gpugeek_schedule(self, line: str, cell: str | None = None) -> None:
        """Example::

            In [1]: %%gpugeek_schedule --every 1d --gpu-type cpu --count 2 --name daily
               ...: ckpt = gg.checkpoint(os.environ["GPUGEEK_CHECKPOINT_DIR"], model=model)
               ...: ...
            [gpugeek] schedule 'daily' (sched-1a2b3c4d) runs every 1d; next run now; %gpugeek_schedules lists it

            In [2]: %gpugeek_schedule --script-path train.py --cron "0 2 * * *" --timezone Europe/Berlin --pool train

        Each run is a detached job of the user's agent (it runs with no notebook open), resuming from
        the newest checkpoint of the runs before (``GPUGEEK_CHECKPOINT_DIR``). The cell's code and
        the notebook objects it uses are captured now, as for ``%%gpugeek_run --detach``.
        """
        from ..jobs.job_env import parse_assignments
        from ..schedules import create_schedule, pool_options
        from ..schedules.timing import format_seconds

        args = parse_options(self.gpugeek_schedule, line, _SCHEDULE_EXAMPLE)
        script_args = list(args.args)
        if script_args[:1] == ["--"]:
            script_args = script_args[1:]
        if cell is None and args.script_path is None:
            raise UsageError(
                f"%gpugeek_schedule as a line magic schedules a script (e.g. {_SCRIPT_EXAMPLE}); "
                "for notebook code use the cell magic %%gpugeek_schedule"
            )
        if cell is not None and args.script_path is not None:
            raise UsageError(f"--script-path is for the line magic (e.g. {_SCRIPT_EXAMPLE})")
        if script_args and args.script_path is None:
            raise UsageError(
                f"unexpected arguments {' '.join(script_args)!r} (e.g. %%gpugeek_schedule {_SCHEDULE_EXAMPLE})"
            )
        shell = self.shell
        assert shell is not None
        with usage_errors():
            from ..jobs import cell_request, script_request

            common: dict[str, Any] = {
                "timeout": option_number(args.timeout, "timeout", 3600),
                "max_restarts": option_number(args.max_restarts, "max_restarts", 2, integer=True),
                "env": parse_assignments(args.env),
            }
            if args.script_path is not None:
                request = script_request(args.script_path, script_args, **common)
            else:
                assert cell is not None
                request = cell_request(cell, shell.user_ns, hidden=set(shell.user_ns_hidden), **common)
            schedule = create_schedule(
                request,
                every=args.every,
                cron=args.cron,
                timezone=args.timezone,
                resume=None if args.resume == "none" else args.resume,
                pool=args.pool,
                name=args.name,
                overlap=args.overlap,
                max_failures=option_number(args.max_failures, "max_failures", 3, integer=True),
                checkpoints=args.checkpoints,
                pool_options=pool_options(
                    gpu_type=args.gpu_type,
                    count=args.count,
                    backend=args.backend,
                    budget=args.budget,
                    spot_fraction=args.spot_fraction,
                    walltime=args.walltime,
                ),
                created_by=_who(),
            )
        record = schedule.record()
        when = f"every {format_seconds(record.every_s)}" if record.every_s else f"by cron {record.cron!r}"
        print(
            f"[gpugeek] schedule {record.name!r} ({record.id}) runs {when}; next run {_when(record.next_run_at)}; "
            "%gpugeek_schedules lists it"
        )

    @magic_arguments()
    @argument("action", nargs="?", default=None, help="pause, resume or delete (default: list the schedules)")
    @argument("schedule", nargs="?", default=None, help="the schedule's name or id")
    @line_magic
    def gpugeek_schedules(self, line: str) -> Any:
        """Example::

            In [1]: %gpugeek_schedules
            name   status  when       next run  last run   job           cost
            daily  active  every 1d   in 23h    succeeded  job-1a2b3c4da910  $0.0004

            In [2]: %gpugeek_schedules pause daily

        Lists the user's schedules with their next and last run (outcome, job, cost); ``pause``,
        ``resume`` or ``delete`` one by name or id.
        """
        from ..schedules import find_schedule, list_schedules

        args = parse_options(self.gpugeek_schedules, line, _SCHEDULES_EXAMPLE)
        if args.action is None:
            with usage_errors():
                return schedule_table(list_schedules())
        if args.action not in ACTIONS or args.schedule is None:
            raise UsageError(
                f"%gpugeek_schedules takes pause, resume or delete and a schedule's name, got {line.strip()!r} "
                f"(e.g. %gpugeek_schedules {_SCHEDULES_EXAMPLE})"
            )
        with usage_errors():
            schedule = find_schedule(args.schedule)
            getattr(schedule, args.action)()
        return None


def schedule_table(models: list[dict[str, Any]]) -> Any:
    """The schedules as a DataFrame (one row each), or a line saying there are none."""
    import pandas as pd

    if not models:
        print("[gpugeek] no schedules; make one with %%gpugeek_schedule --every 1d ...")
        return None
    rows = []
    for model in models:
        last = model["last_run"] or {}
        rows.append(
            {
                "name": model["name"],
                "status": model["status"] + (f" ({model['reason']})" if model["status"] == "paused" else ""),
                "when": model["when"],
                "next run": _when(model["next_run_at"]) if model["next_run_at"] else "-",
                "last run": last.get("status", "-"),
                "job": last.get("job_id") or "-",
                "cost": f"${last['cost_usd']:.4f}" if last.get("cost_usd") is not None else "-",
            }
        )
    return pd.DataFrame(rows)


def _when(at: float) -> str:
    left = at - time.time()
    if left <= 1:
        return "now"
    if left < 3600 * 24:
        from ..schedules.timing import format_seconds

        return f"in {format_seconds(round(left) if left < 120 else round(left / 60) * 60)}"
    return local_time(at, seconds=False)


def _who() -> str:
    from ..jobs.pool_queue import this_submitter

    return this_submitter().label
