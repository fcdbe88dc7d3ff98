"""PyTorch's NCCL process group on Accord: collectives on CUDA tensors, results checked exactly.

    LD_PRELOAD=$PWD/build/nccl/libaccord_nccl.so \
        python3 -m torch.distributed.run --nproc-per-node 2 examples/torch_allreduce.py

Each rank takes GPU LOCAL_RANK modulo the GPUs (ranks share a GPU where there are fewer GPUs
than ranks, which NCCL itself refuses). Values are small integers, exact in float32 whatever
the order of the sum. Exits 1 on a wrong element, naming the collective, size and index.
Without the preload it runs on PyTorch's own NCCL (where each rank has its own GPU).
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def accord_loaded():
    with open("/proc/self/maps") as f:
        return any("libaccord" in line for line in f)


def main():
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"torch {torch.__version__}, {world} ranks, {torch.cuda.device_count()} GPUs, "
              f"NCCL library: {'Accord' if accord_loaded() else 'NCCL'}", flush=True)
    bad = 0

    def check(name, got, want):
        nonlocal bad
        diff = (got != want).nonzero()
        if diff.numel():
            i = diff[0].item()
            print(f"rank {rank}: {name}: element {i} is {got[i].item()}, expected {want[i].item()}",
                  flush=True)
            bad += 1

    for n in (1, 1031, 262147, 4 << 20):
        i = torch.arange(n, device=dev, dtype=torch.int64) % 5
        x = (i + rank + 1).float()
        total = (i * world + world * (world + 1) // 2).float()
        y = x.clone()
        dist.all_reduce(y)
        check(f"all_reduce sum n={n}", y, total)
        y = x.clone()  # async_op=True: on PyTorch's own NCCL stream, as DDP's buckets
        dist.all_reduce(y, async_op=True).wait()
        check(f"all_reduce async n={n}", y, total)
        y = x.clone()
        dist.all_reduce(y, op=dist.ReduceOp.AVG)
        check(f"all_reduce avg n={n}", y, total / world)
        y = x.clone()
        dist.broadcast(y, src=world - 1)
        check(f"broadcast n={n}", y, (i + world).float())
        out = torch.empty(n * world, device=dev)
        dist.all_gather_into_tensor(out, x)
        want = torch.cat([(i + r + 1).float() for r in range(world)])
        check(f"all_gather n={n}", out, want)
        big = torch.cat([x + r for r in range(world)])
        out = torch.empty(n, device=dev)
        dist.reduce_scatter_tensor(out, big)
        check(f"reduce_scatter n={n}", out, total + world * rank)
    torch.cuda.synchronize()

    # Time: 64 MiB float32 all_reduce, as DDP's buckets are (25 MiB default) or larger.
    for nbytes in (8, 1 << 20, 64 << 20):
        y = torch.ones(max(1, nbytes // 4), device=dev)
        for _ in range(3):
            dist.all_reduce(y)
        torch.cuda.synchronize()
        dist.barrier()
        iters = 20
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(y)
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) / iters * 1e6
        busbw = y.numel() * 4 * 2 * (world - 1) / world / us / 1e3
        if rank == 0:
            print(f"all_reduce {y.numel() * 4} B: {us:.1f} us, busbw {busbw:.2f} GB/s", flush=True)
    dist.destroy_process_group()
    if bad:
        sys.exit(1)
    if rank == 0:
        print("all results exact", flush=True)


if __name__ == "__main__":
    main()
