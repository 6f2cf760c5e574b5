"""``gg.shard``'s loader: each rank's part of a dataset, with a position that resumes at any world size.

The position is global: how many samples of the epoch's order (the same on every rank: ``seed +
epoch``) all ranks together have consumed. Rank ``r`` of ``W`` takes every ``W``-th sample of that
order, so after ``k`` batches of ``b`` on every rank the first ``k * b * W`` samples are consumed,
whichever rank took them. A loader resumed at that position, at any world size, shares out the rest
of the same order: no sample of the epoch is seen twice or skipped.

>>> import torch
>>> loader = ShardLoader(torch.arange(10), batch_size=2, num_replicas=2, rank=0, shuffle=False)
>>> [b.tolist() for (b,) in loader]
[[0, 2], [4, 6], [8]]
>>> loader.state_dict()
{'epoch': 0, 'position': 10}
>>> loader.load_state_dict({"epoch": 0, "position": 4}); [b.tolist() for (b,) in loader]
[[4, 6], [8]]
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, DistributedSampler


class ShardSampler(DistributedSampler[Any]):
    """``DistributedSampler`` that starts ``start`` samples into the epoch's order (the same as it at 0)."""

    def __init__(self, dataset: Any, *, start: int = 0, **options: Any) -> None:
        super().__init__(dataset, **options)
        self.start = start

    @property
    def start(self) -> int:
        return self._start

    @start.setter
    def start(self, value: int) -> None:
        self._start = max(0, min(int(value), len(self.dataset)))  # type: ignore[arg-type]
        left = len(self.dataset) - self._start  # type: ignore[arg-type]
        if self.drop_last and left % self.num_replicas:
            self.num_samples = math.ceil((left - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(left / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[Any]:
        import torch

        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order: list[int] = torch.randperm(len(self.dataset), generator=generator).tolist()  # type: ignore[arg-type]
        else:
            order = list(range(len(self.dataset)))  # type: ignore[arg-type]
        indices = order[self._start :]
        if not indices:
            return iter([])
        if not self.drop_last:  # pad by repeating, as DistributedSampler does
            padding = self.total_size - len(indices)
            indices += (indices * math.ceil(padding / len(indices)))[:padding]
        else:
            indices = indices[: self.total_size]
        return iter(indices[self.rank : self.total_size : self.num_replicas])


class ShardLoader(DataLoader[Any]):
    """A ``DataLoader`` over this rank's shard whose ``state_dict()`` says where the epoch is.

    ``set_epoch(e)`` reshuffles for epoch ``e`` (the same on every rank) and starts it from its
    beginning; iterating a finished epoch again starts it over. ``gg.checkpoint(..., loader=...)``
    saves and restores the position with the step.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        batch_size: int = 64,
        num_replicas: int = 1,
        rank: int = 0,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        epoch: int = 0,
        **loader_options: Any,
    ) -> None:
        import torch
        from torch.utils.data import TensorDataset

        if isinstance(dataset, torch.Tensor):
            dataset = TensorDataset(dataset)
        elif isinstance(dataset, tuple | list) and dataset and all(isinstance(t, torch.Tensor) for t in dataset):
            dataset = TensorDataset(*dataset)
        sampler = ShardSampler(
            dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
        )
        sampler.set_epoch(epoch)
        super().__init__(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **loader_options)
        self._shard_sampler = sampler
        self._position = 0

    @property
    def epoch(self) -> int:
        return int(self._shard_sampler.epoch)

    @property
    def position(self) -> int:
        """Samples of this epoch consumed by all ranks together."""
        return self._position

    def set_epoch(self, epoch: int) -> None:
        if epoch != self._shard_sampler.epoch:
            self._shard_sampler.set_epoch(epoch)
            self._position = 0

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        sampler = self._shard_sampler
        total = len(self.dataset)  # type: ignore[arg-type]
        if self._position >= total:
            self._position = 0  # a finished epoch, iterated again: from its beginning
        sampler.start = base = self._position
        per_batch = (self.batch_size or 1) * sampler.num_replicas
        for count, batch in enumerate(super().__iter__(), start=1):
            self._position = min(total, base + count * per_batch)
            yield batch
        self._position = total

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self._position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._shard_sampler.set_epoch(int(state.get("epoch", 0)))
        self._position = int(state.get("position", 0))
