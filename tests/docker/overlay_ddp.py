"""Run in a replica's container (tests/docker/test_overlay_torch.py, bench/cluster_allreduce.py):
``python3 -c <this> MODE RANK WORLD`` with MASTER_ADDR/MASTER_PORT in the environment.

MODE ``allreduce``: a gloo all-reduce of small and 1M-element tensors; prints their sums.
MODE ``ddp``: a tiny seeded linear model trained with DistributedDataParallel on a shard of
synthetic data (``WORLD`` = 1: the whole batch in one process); prints the final weights.
MODE ``bench``: all-reduce latency (4 floats) and bandwidth (4 MiB) over many rounds."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

mode, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if world > 1:
    dist.init_process_group("gloo", rank=rank, world_size=world)

if mode == "allreduce":
    small = torch.full((4,), float(rank + 1))
    dist.all_reduce(small)
    big = torch.arange(1_000_000, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(big)
    print(json.dumps({"small": small.tolist(), "big_sum": float(big.sum())}))
elif mode == "ddp":
    torch.manual_seed(7)
    inputs = torch.randn(64, 8)
    targets = inputs @ torch.arange(1.0, 9.0).unsqueeze(1) + 0.5
    model = torch.nn.Linear(8, 1)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    shard = slice(rank * 64 // world, (rank + 1) * 64 // world)
    for _ in range(30):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs[shard]), targets[shard])
        loss.backward()  # DDP averages the gradients over the ranks: the whole batch's
        optimizer.step()
    module = model.module if world > 1 else model
    print(json.dumps({k: v.flatten().tolist() for k, v in module.state_dict().items()}))
elif mode == "bench":
    rounds = int(os.environ.get("ROUNDS", "50"))
    small, big = torch.ones(4), torch.ones(1024 * 1024)
    for tensor in (small, big):  # warm the connections
        dist.all_reduce(tensor)
    started = time.perf_counter()
    for _ in range(rounds * 4):
        dist.all_reduce(small)
    latency = (time.perf_counter() - started) / (rounds * 4)
    started = time.perf_counter()
    for _ in range(rounds):
        dist.all_reduce(big)
    seconds = (time.perf_counter() - started) / rounds
    print(json.dumps({"latency_s": latency, "bytes_per_s": big.numel() * 4 / seconds}))
if world > 1:
    dist.destroy_process_group()
