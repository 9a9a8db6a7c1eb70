"""Train a small regression model with PyTorch across every task of a Slurm job.

Each task is one rank of DistributedDataParallel over the gloo backend (CPU only): Slurm
says who is who (SLURM_PROCID, SLURM_NTASKS), the batch script says where rank 0 listens
(MASTER_ADDR, MASTER_PORT). Every rank makes its own share of a generated data set, so
nothing has to be downloaded; gloo averages the gradients. Rank 0 writes a checkpoint
after each epoch into --out and then points `latest` at it, so a reader (serve.py) never
sees half a file.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

INPUTS = 2


class Model(nn.Module):
    """A small MLP: two inputs, one output. serve.py builds the same one to load weights into."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(INPUTS, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def target(x: torch.Tensor) -> torch.Tensor:
    """What the model learns: a smooth surface it can fit in a few epochs on a CPU."""
    return torch.sin(3 * x[:, :1]) + 0.5 * x[:, 1:2] ** 2


def shard(rank: int, samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed + rank)
    x = torch.rand(samples, INPUTS, generator=generator) * 2 - 1
    return x, target(x)


def save(out: Path, model: nn.Module, epoch: int, loss: float, ranks: int) -> Path:
    job = os.environ.get("SLURM_JOB_ID", "local")
    name = f"job{job}-epoch{epoch:03d}.pt"
    state = {"model": model.state_dict(), "epoch": epoch, "loss": loss, "job": job, "ranks": ranks}
    partial = out / f".{name}.partial"
    torch.save(state, partial)
    os.replace(partial, out / name)
    pointer = out / ".latest.partial"
    pointer.write_text(name + "\n")
    os.replace(pointer, out / "latest")
    return out / name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for checkpoints (shared)")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--samples", type=int, default=8192, help="samples per rank")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    rank = int(os.environ.get("SLURM_PROCID", "0"))
    ranks = int(os.environ.get("SLURM_NTASKS", "1"))
    address = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = os.environ.get("MASTER_PORT", "29500")
    torch.set_num_threads(int(os.environ.get("SLURM_CPUS_PER_TASK", "1")))
    # Debian's PyTorch is built without libuv, which its TCP rendezvous otherwise asks for.
    rendezvous = f"tcp://{address}:{port}?use_libuv=0"
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=ranks)
    print(f"rank {rank}/{ranks} on {socket.gethostname()}", flush=True)

    torch.manual_seed(args.seed)  # every rank starts from the same weights
    model = nn.parallel.DistributedDataParallel(Model())
    optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = shard(rank, args.samples, args.seed)
    batches = math.ceil(args.samples / args.batch)
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
    times: list[float] = []
    for epoch in range(1, args.epochs + 1):
        started = time.monotonic()
        order = torch.randperm(args.samples)
        total = 0.0
        for b in range(batches):
            pick = order[b * args.batch : (b + 1) * args.batch]
            optimiser.zero_grad()
            loss = nn.functional.mse_loss(model(x[pick]), y[pick])
            loss.backward()
            optimiser.step()
            total += loss.item()
        mean = torch.tensor([total / batches])
        dist.all_reduce(mean)
        times.append(time.monotonic() - started)
        if rank == 0:
            written = save(args.out, model.module, epoch, mean.item() / ranks, ranks)
            print(
                f"epoch {epoch} loss {mean.item() / ranks:.5f} {times[-1]:.3f}s -> {written.name}", flush=True
            )
    if rank == 0:
        print(f"trained on {ranks} ranks; mean epoch {sum(times) / len(times):.3f}s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
