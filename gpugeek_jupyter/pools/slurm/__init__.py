"""The ``slurm`` backend: a pool as Slurm jobs, one dask worker (one rank) each, via dask-jobqueue.

``%gpugeek_launch --backend slurm --gpu-type A100-80GB --count 8 --partition gpu --account proj42
--walltime 04:00:00`` submits 8 Slurm jobs through dask-jobqueue's ``SLURMCluster``; each runs one
dask worker (with its nanny) that owns one GPU, asked for with ``--gres=gpu:<type>:1`` (the
catalog's ``slurm_gres`` for the GPU type, or ``GpugeekConfig.slurm_gres``). A ``cpu`` pool's jobs
are one core each (``--cpus-per-task=1``). The scheduler runs in the launching process, as for local
pools; the workers connect to it from the compute nodes (see ``docs/slurm.md`` for what the site
must allow). Slurm sets ``CUDA_VISIBLE_DEVICES`` in each job to the GPU it assigned; the worker
takes that GPU as its own, and the ranks of one host see their host's GPUs in local-rank order, as
on every backend.

Options, each a flag of ``%gpugeek_launch``, a keyword of ``launch(...)`` and a field of
``POST /gpugeek/pools``, defaulting to ``GpugeekConfig.slurm_*``: ``partition``, ``account``,
``qos``, ``walltime`` (Slurm's formats), ``constraint``, ``sbatch_directives`` (extra ``#SBATCH``
lines) and ``prologue`` (shell lines before the worker starts: ``module load ...``, ``source
venv/bin/activate``). ``--dry-run`` prints the job script (:func:`render_job_script`).

The pool's own TLS credentials (:mod:`gpugeek_jupyter.pools.credentials`) are copied, readable by the user only, into
the pool's folder in ``GpugeekConfig.slurm_shared_directory`` (which the compute nodes must see),
with the workers' logs; the copy goes when the pool stops, or at a later launch once the pool is
no longer live.

Stopping the pool (``%gpugeek_stop``, a budget, idle shutdown, the kernel exiting) closes the
``SLURMCluster``, which ``scancel``\\ s every job. A killed kernel takes the scheduler with it;
each worker then exits at once (or after ``worker_death_timeout`` if it cannot tell), and its
Slurm job ends. :class:`SlurmJobWatcher` records each job's id as a pool event (``slurm-job``,
read by :func:`slurm_job_ids`), notices a job that ended while the pool lives (walltime, scancel,
preemption, node failure), says so (``worker-ended``) and submits a replacement, so the pool heals.

Errors a Slurm user meets are one line naming the value and the fix: no ``sbatch`` on PATH, an
unknown partition, account, QOS, feature or gres (``sbatch --test-only``'s answer, before
anything is submitted), a walltime Slurm does not read or a partition does not allow, jobs still

The modules, each read after those it imports: :mod:`.commands` (Slurm's commands), :mod:`.jobqueue`
(dask-jobqueue's import and its one private call), :mod:`.ports`, :mod:`.credentials` (the pool's
folder and the credentials' copy), :mod:`.script` (the job script), :mod:`.squeue` (job states),
:mod:`.errors` (sbatch's refusals), :mod:`.jobs` (the pool's job ids from its events, scancel),
:mod:`.cluster` (the pool's ``SLURMCluster``), :mod:`.watcher` (:class:`SlurmJobWatcher`),
:mod:`.backend` (:class:`SlurmBackend`), and :mod:`.kept_scheduler`, a kept pool's scheduler in a
process of its own (``python -m gpugeek_jupyter.pools.slurm.kept_scheduler``), which the backend
imports only for a kept pool.
"""

from __future__ import annotations

from .backend import SlurmBackend
from .credentials import KEEP_LOGS_DAYS, prune_pool_folders
from .errors import explain_sbatch_error
from .jobs import EVENT_ENDED, EVENT_JOB, scancel_pool_jobs, slurm_job_ids, slurm_jobs_by_worker
from .ports import port_range
from .script import gres_directive, job_script_options, render_job_script
from .squeue import JobState, job_states
from .watcher import SlurmJobWatcher

__all__ = [
    "EVENT_ENDED",
    "EVENT_JOB",
    "KEEP_LOGS_DAYS",
    "JobState",
    "SlurmBackend",
    "SlurmJobWatcher",
    "explain_sbatch_error",
    "gres_directive",
    "job_script_options",
    "job_states",
    "port_range",
    "prune_pool_folders",
    "render_job_script",
    "scancel_pool_jobs",
    "slurm_job_ids",
    "slurm_jobs_by_worker",
]
