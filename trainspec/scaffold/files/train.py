"""A starting point: PyTorch DistributedDataParallel on a tiny model and synthetic data.

It reads only the standard variables torch reads (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
LOCAL_RANK), which trainspec's shim sets for every process on every target. Replace the model
and the data with yours; try it here first with `trainspec run specs/__NAME__.yaml --local
--nodes 1 --procs-per-node 2` (CPU, gloo).
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(32, 1).to(device), device_ids=[device] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        inputs = torch.randn(64, 32, device=device)
        loss = (model(inputs) - inputs.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if dist.get_rank() == 0:
        print(f"world {dist.get_world_size()}: {args.steps} steps, last loss {loss.item():.4f}")
    # Drop what holds the process group (DDP's reducer does), then destroy it.
    del model, optimizer
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # torch 2.13 with gloo: now and then a process aborts with SIGABRT ("terminate called without
    # an active exception") while the interpreter tears down, after a clean destroy_process_group().
    # The work is done and flushed, so leave without that teardown: a successful rank exits 0.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
