"""``%gpugeek_where``: where every rank of a pool's running job is, live, from a second notebook or console."""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import magic_arguments

from ._common import chosen_pool, parse_options, pool_arguments, usage_errors

EXAMPLE = "dev"


@magics_class
class WhereMagics(Magics):
    @magic_arguments()
    @pool_arguments("whose running job to show (default: the current pool, else the only one running a job)")
    @line_magic
    def gpugeek_where(self, line: str) -> None:
        """Example::

            In [1]: %gpugeek_where dev
            job 3f2a9c on pool 'dev', 8 ranks: ranks 1-7 waiting in dist.all_reduce at train.py:42; rank 0 at data.py:17 in __getitem__
            ranks 1-7, waiting in dist.all_reduce (stack of rank 1, pid 4242 on 10.0.0.2):
                train.py:42 in step: dist.all_reduce(loss)
                  -> torch/distributed/c10d_logger.py:81 in wrapper -> torch/distributed/distributed_c10d.py:2806 in all_reduce
            rank 0 (pid 4241 on 10.0.0.1):
                data.py:17 in __getitem__: time.sleep(1)

        Where each rank of the job running on pool NAME (or ``--pool NAME``) is now: its stack (user
        frames first, library frames condensed) and the collective it waits in, ranks at the same
        line grouped. Run it from another notebook or a console: the job's own kernel is busy. A
        worker that cannot answer within 5 s (frozen, e.g. by C code holding the GIL) is "not
        responding". With no job running, one line says so.
        """
        args = parse_options(self.gpugeek_where, line, EXAMPLE)
        name = chosen_pool(args, "gpugeek_where", EXAMPLE)
        from ..jobs.where import where_report

        with usage_errors():
            pool = name if name is not None else _default_pool()
            if pool is None:
                print("no job is running: no pool is running")
                return
            report = where_report(pool)
        print(report.format())


def _default_pool() -> Any:
    """This kernel's current pool, else the only live pool (or the only one running a job)."""
    from ..jobs.where import pool_to_ask
    from ..runtime import get_pool_manager

    current = get_pool_manager().current
    return current if current is not None else pool_to_ask()
