"""The Python API for jobs: ``ClusterClient`` makes pools, ``Job`` runs scripts on them.

>>> from gpugeek_jupyter import ClusterClient                                   # doctest: +SKIP
>>> job = ClusterClient().create_job(gpu_type="cpu", count=2)                   # doctest: +SKIP
>>> result = job.run(script_path="./train_llm.py", hyperparams={"batch_size": 256, "lr": 3e-5})  # doctest: +SKIP
>>> result.ok, result.returncodes, result.duration_s                            # doctest: +SKIP
(True, [0, 0], 41.7)
>>> job.stop()                                                                  # doctest: +SKIP

The API key is read from ``GPUGEEK_API_KEY`` when not given, and is never shown: not in a repr, a
log line or an error message. Errors are phrased with keyword arguments (``count=4``, ``env={...}``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .detached import JobHandle
    from .jobs.result import JobResult
    from .pools import Pool
    from .schedules import Schedule
    from .store import JobRecord

from .errors import SpecError, Surface, check_keywords, phrased_for

log = logging.getLogger(__name__)

DEFAULT_JOBS_LIMIT = 50  # how many job records a listing shows (jobs(), %gpugeek_jobs, GET /gpugeek/jobs)


class _Secret:
    """A string that does not print itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "'***'" if self._value else "None"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("an API key is not pickled")


class ClusterClient:
    """Entry point of the Python API: pools for jobs, and the job history.

    ``api_key``: your GPUGEEK key; default ``GPUGEEK_API_KEY`` (or ``GpugeekConfig.api_key``).
    """

    def __init__(self, api_key: str | None = None) -> None:
        if api_key is None:
            from .config import get_config

            api_key = os.environ.get("GPUGEEK_API_KEY") or get_config().api_key or ""
        self._api_key = _Secret(str(api_key))

    def __repr__(self) -> str:
        return f"ClusterClient(api_key={self._api_key!r})"

    @property
    def has_api_key(self) -> bool:
        return bool(self._api_key)

    def create_job(
        self,
        gpu_type: str = "cpu",
        count: int = 2,
        interconnect: str | None = None,
        framework: str | None = None,
        keep: bool = False,
        **pool_options: Any,
    ) -> Job:
        """Launch a pool for a job (``count`` ranks, one per GPU or CPU worker) and return the ``Job``.

        ``pool_options`` are the pool's other options (``name``, ``backend``, ``spot_fraction``,
        ``budget``, ``idle_timeout``, ``address``, ...), as for ``%gpugeek_launch``. ``keep=True``:
        the user's agent owns the pool, which then outlives this process and takes ``Job.submit``.
        """
        from .runtime import get_pool_manager
        from .spec import PoolSpec, launch_keywords

        with phrased_for(Surface.PYTHON):
            if not isinstance(keep, bool):
                raise SpecError(field="keep", value=keep, rule="True or False", example=True)
            check_keywords(pool_options, launch_keywords() | {"keep"}, "create_job()")
            spec = PoolSpec.create(
                gpu_type=gpu_type, count=count, interconnect=interconnect, framework=framework, **pool_options
            )
            if keep:
                from .detached import launch_kept

                return Job(launch_kept(spec), owns_pool=False)  # it outlives this process: stop it yourself
            pool = get_pool_manager().launch(spec)
        return Job(pool, owns_pool=True)

    def job_on(self, pool: str) -> Job:
        """A ``Job`` on running pool ``pool`` (launched here, in another kernel, or attached by address),
        as ``%%gpugeek_run --pool NAME`` runs on it."""
        from .runtime import get_pool_manager

        with phrased_for(Surface.PYTHON):
            return Job(get_pool_manager().get(pool), owns_pool=False)

    def jobs(self, pool: str | None = None, limit: int = DEFAULT_JOBS_LIMIT) -> list[JobRecord]:
        """The newest ``limit`` job records of the registry, of pool ``pool`` or of every pool, every
        kernel included; the pool comes first, as NAME does in ``%gpugeek_jobs NAME --limit N``.

        >>> [j.id for j in ClusterClient().jobs("misc", limit=2)]   # doctest: +SKIP
        ['job-3f2a9c7b8c19', 'job-1b2c3d4ea017']
        """
        from .store import get_registry

        with phrased_for(Surface.PYTHON):
            if pool is not None and not isinstance(pool, str):
                # jobs(5) read the newest 5 before the pool came first: say where the number goes
                raise SpecError(
                    field="pool", value=pool, rule="a pool name (a number of jobs is limit=N)", example="misc"
                )
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise SpecError(field="limit", value=limit, rule="a whole number >= 1", example=20)
            registry = get_registry()
            pool_id = registry.latest_pool(pool).id if pool else None
            return registry.list_jobs(pool_id=pool_id, limit=limit)

    def schedule(self, script_path: str | None = None, cell: str | None = None, **options: Any) -> Schedule:
        """Run a script or a cell every interval or by cron, as detached jobs of the user's agent,
        each run resuming from the newest checkpoint of the runs before; the ``Schedule``. The
        options are :func:`gpugeek_jupyter.schedule`'s (``every="1d"``, ``cron="0 2 * * *"``,
        ``pool=`` or ``gpu_type=``/``count=``, ``overlap=``, ``max_failures=``, ...).

        >>> ClusterClient().schedule(script_path="train.py", every="1d", gpu_type="cpu", count=2)  # doctest: +SKIP
        <Schedule schedule-3f2a (sched-1a2b3c4d) active>
        """
        from .schedules import schedule

        if cell is not None and options.get("namespace") is None:
            options["namespace"] = sys._getframe(1).f_globals  # the caller's, as a cell sees its notebook's
        return schedule(script_path, cell, **options)


class Job:
    """A pool to run on, and the runs made on it. ``stop()`` stops the pool when the job launched it."""

    def __init__(self, pool: Pool, owns_pool: bool = True) -> None:
        self.pool = pool
        self.owns_pool = owns_pool
        self._handed_to_agent = False  # launched by this job, then kept by the agent for a submitted one
        self.results: list[JobResult] = []

    def __repr__(self) -> str:
        spec = self.pool.spec
        return f"<Job on pool {self.pool.name!r} ({spec.count} x {spec.gpu_type}), {len(self.results)} run(s)>"

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run(
        self,
        script_path: str,
        hyperparams: dict[str, Any] | None = None,
        args: Sequence[str] = (),
        timeout: float | None = None,
        max_restarts: int = 0,
        stream: bool = True,
        on_output: Callable[[int, str, str], None] | None = None,
        env: dict[str, str] | None = None,
        output: str | None = None,
        min_ranks: int | None = None,
        wait: bool = True,
        track: bool | str | None = None,
    ) -> JobResult:
        """Run a script on every rank as ``torchrun --nproc_per_node=N`` would; returns a ``JobResult``.

        A pool runs one job at a time, whichever process submits it: on a busy pool the run waits
        its turn in the pool's queue, saying on stderr which job it waits for (``wait=False``
        raises :class:`~gpugeek_jupyter.errors.PoolBusyError` naming that job instead). ``timeout``
        counts from the start of the run; ``result.waited_s`` is the time spent in the queue.

        ``hyperparams`` become ``--name value`` arguments after ``args``; ``True`` is the bare
        ``--name`` (argparse's ``store_true``) and ``False`` leaves the flag out. Output is written
        live, labelled ``[rank N]``, to this process's stdout/stderr (or given to ``on_output(rank,
        stream, text)``). A failed job is a result with ``ok`` False (``raise_for_status()`` raises);
        an interrupt stops every rank, then raises ``KeyboardInterrupt``.

        ``env`` sets variables in every rank for this run only (``env={"NCCL_DEBUG": "INFO"}``),
        on every backend; torchrun's own variables cannot be overridden.

        ``min_ranks`` makes the job elastic (torchrun's ``--nnodes=MIN:MAX``): when workers are lost
        and not replaced within ``elastic_wait_seconds``, it restarts (``max_restarts`` counts it) on
        the workers that remain, if at least ``min_ranks``, with the new ``WORLD_SIZE``; the script
        resumes from its own checkpoint. ``result.sizes`` lists the world sizes it ran at.

        ``output`` is how the ranks' lines are written: ``"grouped"`` (lines alike shown once, as
        ``[ranks 0-7] ...``), ``"all"`` (``[rank N]`` each) or ``"rank0"``; by default
        ``GpugeekConfig.output_mode`` (grouped past 2 ranks). Every rank's full log stays on disk:
        ``result.logs(rank)``.

        ``track`` makes the job one MLflow run: by default when ``GpugeekConfig.mlflow_tracking_uri``
        is set; ``False``: no run; ``True``: at that setting's server (an error without one); a URI
        (``track="http://127.0.0.1:5000"``): at that server.
        """
        from .jobs import run_script
        from .jobs.job_env import check_job_env
        from .jobs.output import output_writer, resolve_output_mode
        from .jobs.pool_queue import WaitLines
        from .jobs.progress_text import TextProgress

        with phrased_for(Surface.PYTHON):
            env = check_job_env(env)
            world_size = max(1, int(self.pool.spec.count))
            writer = output_writer(output, world_size) if stream and on_output is None else None
            progress = TextProgress(resolve_output_mode(output, world_size)) if writer is not None else None
            try:
                result = run_script(
                    self.pool,
                    script_path,
                    args=args,
                    hyperparams=hyperparams,
                    timeout=timeout,
                    max_restarts=max_restarts,
                    min_ranks=min_ranks,
                    stream=stream,
                    on_output=on_output if on_output is not None else writer,
                    on_progress=progress,
                    env=env,
                    wait=wait,
                    track=track,
                    on_wait=WaitLines(),
                )
            finally:
                if writer is not None:
                    writer.close()
        self.results.append(result)
        if result.status.value == "cancelled":
            raise KeyboardInterrupt(result.failure)
        return result

    def run_cell(self, cell: str, namespace: Mapping[str, Any] | None = None, **options: Any) -> JobResult:
        """Run notebook code on every rank and wait for it, as ``%%gpugeek_run`` does (the same
        :func:`gpugeek_jupyter.jobs.run_cell`): names the cell uses come from ``namespace``; the
        options are the cell's (``ranks``, ``rank0``, ``amp``, ``timeout``, ``max_restarts``,
        ``min_ranks``, ``env``, ``wait``, ``on_output``, ...). Its ``JobResult``; ``result.values``
        holds each rank's value of the cell's last expression.

        >>> job.run_cell("import torch.distributed as dist\ndist.get_rank()").values   # doctest: +SKIP
        [0, 1]
        """
        from .jobs import cell_keywords, run_cell

        with phrased_for(Surface.PYTHON):
            check_keywords(options, cell_keywords(), "run_cell()")
            result = run_cell(self.pool, cell, namespace if namespace is not None else {}, **options)
        self.results.append(result)
        return result

    def submit_cell(self, cell: str, namespace: Mapping[str, Any] | None = None, **options: Any) -> JobHandle:
        """Start notebook code on every rank without waiting, as ``%%gpugeek_run --detach`` does: the
        code and the names it uses from ``namespace`` are captured now; its
        :class:`~gpugeek_jupyter.JobHandle`. The pool becomes kept as for :meth:`submit`."""
        from .detached import submit_request
        from .jobs import cell_keywords, cell_request

        with phrased_for(Surface.PYTHON):
            check_keywords(options, cell_keywords(submitted=True), "submit_cell()")
            request = cell_request(cell, namespace if namespace is not None else {}, **options)
            self._keep_pool()
            return submit_request(self.pool, request)

    def _keep_pool(self) -> None:
        """The pool the agent's (see :func:`gpugeek_jupyter.detached.keep_pool`), saying so when it
        was launched again for it."""
        from .detached import keep_pool

        self.pool, kept_now = keep_pool(self.pool)
        if kept_now is not None:
            self.owns_pool = False  # the agent's now, like a pool of create_job(keep=True)
            self._handed_to_agent = True
            print(f"[gpugeek] {kept_now}", file=sys.stderr, flush=True)

    def submit(
        self,
        script_path: str,
        hyperparams: dict[str, Any] | None = None,
        args: Sequence[str] = (),
        timeout: float | None = None,
        max_restarts: int = 0,
        env: dict[str, str] | None = None,
        min_ranks: int | None = None,
        track: bool | str | None = None,
    ) -> JobHandle:
        """Start a script as :meth:`run` would, without waiting: its :class:`~gpugeek_jupyter.JobHandle`
        (``.status()``, ``.logs(follow=True)``, ``.wait()``, ``.result()``, ``.cancel()``).

        The job is the user's agent's, so it goes on when this process ends, and so is its pool: a
        pool this job launched that is not kept yet (``create_job(..., keep=True)``) is launched again
        by the agent first (a line on stderr says so); it then ends by ``pool.stop()`` or
        ``%gpugeek_stop``, not by this ``Job``'s :meth:`stop` nor with this process.

        >>> handle = job.submit(script_path="train.py", hyperparams={"lr": 3e-5})   # doctest: +SKIP
        >>> gpugeek_jupyter.job(handle.id).wait().result().returncodes              # doctest: +SKIP
        [0, 0]
        """
        from .detached import submit_request
        from .jobs import script_request

        with phrased_for(Surface.PYTHON):
            self._keep_pool()
            request = script_request(
                script_path,
                args,
                hyperparams,
                timeout=timeout,
                max_restarts=max_restarts,
                min_ranks=min_ranks,
                env=env,
                track=track,
            )
            return submit_request(self.pool, request)

    def stop(self) -> None:
        """Stop the pool (when this job launched it; a pool it only uses is left running)."""
        if self.owns_pool and self.pool.status.is_live:
            self.pool.stop()
        elif self._handed_to_agent and self.pool.status.is_live:  # it was this job's: say where it went
            name = self.pool.name
            print(
                f"[gpugeek] pool {name!r} is left running: it is the agent's since a job was submitted to it "
                f"(stop it with job.pool.stop() or %gpugeek_stop {name})",
                file=sys.stderr,
                flush=True,
            )
