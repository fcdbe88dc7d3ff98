"""Training with PyTorch's DistributedDataParallel, on Accord, NCCL or Gloo.

    # PyTorch's NCCL process group on Accord (no change to the script):
    LD_PRELOAD=$PWD/build/nccl/libaccord_nccl.so \
        python3 -m torch.distributed.run --nproc-per-node 2 examples/pytorch_ddp.py --out /tmp/ddp
    # the same job on Gloo, then the losses compared step by step, bit for bit:
    python3 -m torch.distributed.run --nproc-per-node 2 examples/pytorch_ddp.py --backend gloo \
        --out /tmp/ddp_gloo
    python3 scripts/compare_losses.py /tmp/ddp.rank0 /tmp/ddp_gloo.rank0

A small MLP (32 -> 128 -> 128 -> 10) learns a fixed random "teacher" on synthetic data made
from a seed (nothing is downloaded): each step takes the next global batch, and rank r trains
on its r-th slice of it; DDP averages the gradients. Every rank prints and writes one line per
step to OUT.rankR: the step, its own loss (as float.hex, exact, then in decimal), and the mean
loss over the ranks. At the end it prints the milliseconds a step took (after a warm-up).

The run is deterministic (torch.use_deterministic_algorithms, cuBLAS's fixed workspace, no
cuDNN: the model has only matrix products), so two jobs with the same number of ranks give the
same losses bit for bit whatever the backend: the all-reduce of 2 ranks adds two numbers,
which is exact in any order. With more ranks the order of the sum may differ between backends,
and with another number of ranks the batches differ, so only the trend compares.

Without a launcher (no RANK in the environment) it runs as one process. Each rank takes GPU
LOCAL_RANK modulo the GPUs: ranks share a GPU where there are fewer GPUs than ranks, which
Accord and Gloo allow and NCCL refuses.
"""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

INPUTS, HIDDEN, CLASSES = 32, 128, 10


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                   help="process group backend (default: nccl on cuda, gloo on cpu)")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="where the model runs (default: cuda if PyTorch sees a GPU)")
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--batch", type=int, default=256,
                   help="global batch: every rank trains on batch / ranks samples a step")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (momentum 0.9)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the model")
    p.add_argument("--warmup", type=int, default=10, help="steps not counted in ms a step")
    p.add_argument("--out", default="pytorch_ddp_losses",
                   help="each rank writes its losses to OUT.rankR (default pytorch_ddp_losses)")
    p.add_argument("--quiet", action="store_true", help="print only every 50th step")
    return p.parse_args()


def single_process_environment():
    """torch.distributed needs a rendezvous even for one process: a free local port."""
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))


def accord_loaded():
    with open("/proc/self/maps") as f:
        return any("libaccord" in line for line in f)


def batch(step, args, teacher, world, rank):
    """The step's global batch from its own seed, and this rank's slice of it (on the CPU, so
    that every device and backend sees the same numbers)."""
    if args.batch % world:
        sys.exit(f"--batch {args.batch} does not split into {world} ranks")
    g = torch.Generator().manual_seed(args.seed * 1000003 + step)
    x = torch.randn(args.batch, INPUTS, generator=g)
    y = (x @ teacher).argmax(dim=1)
    per = args.batch // world
    return x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]


def main():
    args = parse_args()
    single_process_environment()
    device_kind = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    backend = args.backend or ("nccl" if device_kind == "cuda" else "gloo")
    if device_kind == "cuda":
        # cuBLAS picks reduction orders by workspace; a fixed one makes the products repeatable.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device_kind == "cuda":
        dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        dist.init_process_group(backend, device_id=dev if backend == "nccl" else None)
    else:
        dev = torch.device("cpu")
        dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    library = ("Accord" if accord_loaded() else "NCCL") if backend == "nccl" else "Gloo"
    if rank == 0:
        print(f"torch {torch.__version__}, {world} rank{'s' if world > 1 else ''}, backend {backend} "
              f"({library}), device {device_kind}, {args.steps} steps of {args.batch} samples",
              flush=True)

    torch.manual_seed(args.seed)
    teacher = torch.randn(INPUTS, CLASSES, generator=torch.Generator().manual_seed(args.seed + 1))
    model = nn.Sequential(nn.Linear(INPUTS, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, CLASSES)).to(dev)
    ddp = DDP(model, device_ids=[dev.index] if device_kind == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    out = open(f"{args.out}.rank{rank}", "w")
    out.write(f"# {library} {backend} {device_kind}, {world} ranks, rank {rank}: "
              "step, own loss (hex), own loss, mean loss of the ranks\n")

    def sync():
        if device_kind == "cuda":
            torch.cuda.synchronize(dev)

    mean = torch.zeros(1, device=dev)
    t0 = None
    for step in range(args.steps):
        if step == args.warmup:
            sync()
            t0 = time.perf_counter()
        x, y = batch(step, args, teacher, world, rank)
        x, y = x.to(dev), y.to(dev)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()  # DDP's hooks all-reduce the gradients here
        opt.step()
        mean.copy_(loss.detach())
        dist.all_reduce(mean)
        own, avg = loss.item(), mean.item() / world
        out.write(f"{step} {own.hex()} {own:.9g} {avg:.9g}\n")
        if not args.quiet or step % 50 == 0 or step == args.steps - 1:
            print(f"rank {rank} step {step} loss {own:.6f} mean {avg:.6f}", flush=True)
    sync()
    counted = args.steps - args.warmup
    ms = (time.perf_counter() - t0) * 1e3 / counted if t0 is not None and counted > 0 else float("nan")
    out.write(f"# ms a step: {ms:.3f} over {counted} steps\n")
    out.close()
    print(f"rank {rank}: {library} {backend} {device_kind} {world} ranks: {ms:.3f} ms a step "
          f"(over {counted} steps after {args.warmup}), losses in {args.out}.rank{rank}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
