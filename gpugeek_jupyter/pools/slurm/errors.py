"""sbatch's refusal of a pool's job script as one line naming the value and the fix
(``sbatch --test-only`` asks before anything is queued)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...config import get_config
from ...errors import BackendUnavailableError, GpugeekError, Phrase, Setting, SpecError, Value
from .commands import first_error_line, partitions, run_command
from .script import gres_directive

if TYPE_CHECKING:
    from ...spec import PoolSpec


def _refused(field: str, value: Any, template: str, example: Any, **parts: Any) -> SpecError:
    return SpecError(
        Phrase(template, **parts), field=field, value=value, rule=f"a {field} Slurm accepts", example=example
    )


def explain_sbatch_error(stderr: str, spec: PoolSpec) -> GpugeekError:
    """``sbatch``'s refusal of the pool's job script as one line naming the value and the fix."""
    said = first_error_line(stderr)
    lowered = stderr.lower()
    quoted = f"(sbatch: {said})"
    if "invalid partition" in lowered:
        known = partitions()
        return _refused(
            "partition",
            spec.partition,
            "{field} {value}: Slurm has no such partition {said}; choose one of {known} (sinfo -s), e.g. {example}",
            example=known[0] if known else "gpu",
            said=quoted,
            known=", ".join(known) or "those sinfo lists",
        )
    if "invalid account" in lowered:
        return _refused(
            "account",
            spec.account,
            "{field} {value}: Slurm refused the account {said}; use one of yours "
            "(sacctmgr -n show associations user=$USER format=account,partition), e.g. {example}",
            example="proj42",
            said=quoted,
        )
    if "invalid qos" in lowered:
        return _refused(
            "qos",
            spec.qos,
            "{field} {value}: Slurm refused the QOS {said}; use one your account has "
            "(sacctmgr -n show associations user=$USER format=qos), e.g. {example}",
            example="normal",
            said=quoted,
        )
    if "invalid feature" in lowered:
        return _refused(
            "constraint",
            spec.constraint,
            "{field} {value}: no node has these features {said}; the nodes' features are in "
            "sinfo -o '%P %f', e.g. {example}",
            example="a100",
            said=quoted,
        )
    if "time limit" in lowered or "--time specification" in lowered:
        return _refused(
            "walltime",
            spec.walltime,
            "{field} {value}: Slurm refused the time limit {said}; the partitions' limits are in "
            "sinfo -o '%P %l' (ask for less, or another partition), e.g. {example}",
            example="04:00:00",
            said=quoted,
        )
    if "gres" in lowered or "node configuration is not available" in lowered or "processors requested" in lowered:
        gres = gres_directive(spec)
        asked = [gres] if gres else []
        asked += [f"--cpus-per-task={get_config().slurm_cpus_per_worker}"] if get_config().slurm_cpus_per_worker else []
        asked += [f"--mem={get_config().slurm_memory_per_worker}"] if get_config().slurm_memory_per_worker else []
        return BackendUnavailableError(
            Phrase(
                "no node of partition {partition} can take one worker's job ({asked}) {said}; the nodes' gres "
                "are in sinfo -o '%P %G' (a site names its GPU types: set GpugeekConfig.slurm_gres, e.g. "
                "{{'{gpu}': 'a100'}}), or try another {field}",
                partition=Value(spec.partition or "(default)"),
                asked=" ".join(asked) or "one core",
                said=quoted,
                gpu=spec.gpu_type,
            ),
            field="partition",
            value=spec.partition,
        )
    if "unable to contact slurm controller" in lowered or "connection refused" in lowered:
        return BackendUnavailableError(f"Slurm's controller does not answer {quoted}; is slurmctld up? (scontrol ping)")
    return BackendUnavailableError(
        Phrase(
            "sbatch refused the pool's job script {said}; see it with {dry_run}",
            said=quoted,
            dry_run=Setting(backend="slurm", dry_run=True),
        )
    )


def sbatch_test_only(script: str, spec: PoolSpec) -> None:
    """``sbatch --test-only``: Slurm checks the job (partition, account, QOS, features, gres, time)
    without queueing it."""
    answer = run_command("sbatch", "--test-only", stdin=script)
    if answer.returncode != 0:
        raise explain_sbatch_error(answer.stderr or answer.stdout, spec)
