"""Lightning Fabric training a small classifier on CPU with DDP, launched with torchrun.

    torchrun --nproc_per_node=2 lightning_fabric.py --steps 12

Fabric finds the torchelastic environment torchrun sets up, joins the gloo process group, wraps the
model in DDP and gives each rank its shard of a DataLoader with two worker processes. Rank 0 prints
``FINAL_LOSS=<float>``: the last step's loss averaged over the ranks.
"""

from __future__ import annotations

import argparse

import torch
from lightning.fabric import Fabric
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def synthetic_blobs(size: int = 256, features: int = 8, classes: int = 3) -> TensorDataset:
    """Gaussian blobs around fixed random centres: the same data on every rank."""
    generator = torch.Generator().manual_seed(1234)
    centres = 2.0 * torch.randn(classes, features, generator=generator)
    labels = torch.randint(0, classes, (size,), generator=generator)
    points = centres[labels] + torch.randn(size, features, generator=generator)
    return TensorDataset(points, labels)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--lr", type=float, default=0.1)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp", num_nodes=1)
    fabric.launch()
    fabric.seed_everything(0)

    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(synthetic_blobs(), batch_size=8, shuffle=True, num_workers=2))
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    loss = torch.zeros(())
    while step < args.steps:
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            step += 1
            if step == args.steps:
                break
    final = fabric.all_reduce(loss.detach(), reduce_op="mean")
    fabric.print(f"FINAL_LOSS={final.item():.10g}")


if __name__ == "__main__":
    main()
