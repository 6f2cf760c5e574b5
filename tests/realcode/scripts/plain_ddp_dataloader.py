"""Plain PyTorch DDP training with a multi-process DataLoader, launched with torchrun.

    torchrun --nproc_per_node=2 plain_ddp_dataloader.py --epochs 3

A small regression model on a synthetic dataset; each rank reads its shard through a
DistributedSampler with two DataLoader worker processes: the first epoch starts and ends its own
workers, the later ones share one persistent_workers=True loader. Rank 0 prints
``FINAL_LOSS=<float>``: the last epoch's loss averaged over all ranks.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class SyntheticRegression(Dataset):
    """``y = x @ w + noise`` for a fixed seed, so every rank builds the same dataset."""

    def __init__(self, size: int = 256, features: int = 16) -> None:
        generator = torch.Generator().manual_seed(1234)
        self.x = torch.randn(size, features, generator=generator)
        weight = torch.randn(features, 1, generator=generator)
        self.y = self.x @ weight + 0.1 * torch.randn(size, 1, generator=generator)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=8)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    dataset = SyntheticRegression()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    first = DataLoader(dataset, batch_size=args.batch_size, num_workers=2, sampler=sampler)
    persistent = DataLoader(
        dataset, batch_size=args.batch_size, num_workers=2, sampler=sampler, persistent_workers=True
    )
    epoch_loss = torch.zeros(1)
    for epoch in range(args.epochs):
        loader = first if epoch == 0 else persistent
        sampler.set_epoch(epoch)
        total, batches = 0.0, 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
        epoch_loss = torch.tensor([total / batches])
        dist.all_reduce(epoch_loss)
        epoch_loss /= world_size
        if rank == 0:
            print(f"epoch {epoch} loss {epoch_loss.item():.6f}", flush=True)

    if rank == 0:
        print(f"FINAL_LOSS={epoch_loss.item():.10g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
