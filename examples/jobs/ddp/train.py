"""DDP training of a tiny linear model on synthetic data (examples/jobs/ddp/job.toml).

Written as for `torchrun`: the rank, world size and rendezvous come from the environment
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; init_method "env://"). Without them it trains
in one process on the whole batch: with the same seed and data, DDP's averaged gradients
give the same weights (within float tolerance).

    python3 train.py prepare    # the synthetic data, into the workspace
    python3 train.py            # train (one rank, or alone), weights into outputs/
    python3 train.py evaluate   # the trained weights' loss on the data
"""

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

DATA = Path("data.pt")
OUT = Path("outputs")


def prepare() -> None:
    torch.manual_seed(7)
    inputs = torch.randn(64, 8)
    targets = inputs @ torch.arange(1.0, 9.0).unsqueeze(1) + 0.5
    torch.save({"inputs": inputs, "targets": targets}, DATA)
    print(f"prepared {len(inputs)} samples")


def train() -> None:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    steps = int(os.environ.get("STEPS", "30"))
    pause = float(os.environ.get("STEP_PAUSE_S", "0"))  # a slower run, to stop one midway
    if world > 1:
        dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
        print(f"rank {rank} of {world} joined {os.environ['MASTER_ADDR']}", flush=True)
    data = torch.load(DATA)
    torch.manual_seed(7)
    model = torch.nn.Linear(8, 1)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    shard = slice(rank * 64 // world, (rank + 1) * 64 // world)
    for step in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data["inputs"][shard]), data["targets"][shard])
        loss.backward()  # DDP averages the gradients over the ranks: the whole batch's
        optimizer.step()
        if pause:
            print(f"step {step}", flush=True)
            time.sleep(pause)
    module = model.module if world > 1 else model
    weights = {k: v.flatten().tolist() for k, v in module.state_dict().items()}
    OUT.mkdir(exist_ok=True)
    (OUT / "weights.json").write_text(json.dumps(weights))
    print("weights " + json.dumps(weights), flush=True)
    if world > 1:
        dist.destroy_process_group()


def evaluate() -> None:
    data = torch.load(DATA)
    weights = json.loads((OUT / "weights.json").read_text())
    model = torch.nn.Linear(8, 1)
    model.load_state_dict(
        {k: torch.tensor(v).reshape(model.state_dict()[k].shape) for k, v in weights.items()}
    )
    with torch.no_grad():
        loss = torch.nn.functional.mse_loss(model(data["inputs"]), data["targets"])
    print(f"evaluated: mse {loss.item():.6f}")


if __name__ == "__main__":
    {"prepare": prepare, "evaluate": evaluate}.get(
        sys.argv[1] if len(sys.argv) > 1 else "", train
    )()
