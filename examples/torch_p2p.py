"""PyTorch's point-to-point calls and pre-multiplied sums on Accord, results checked exactly.

    LD_PRELOAD=$PWD/build/nccl/libaccord_nccl.so \\
        python3 -m torch.distributed.run --nproc-per-node 2 examples/torch_p2p.py
    python3 -m torch.distributed.run --nproc-per-node 2 examples/torch_p2p.py --backend gloo

What pipeline parallelism and mixture-of-experts layers issue (issue 35): send and recv around
the ring, isend/irecv batched with batch_isend_irecv (both directions to every peer at once),
all_to_all_single with equal and with uneven splits, and all_reduce with
torch.distributed._make_nccl_premul_sum (the NCCL backend only; Gloo has no such op, so
--backend gloo leaves it out and says so). Sizes 1, a prime, and 4 Mi elements (more than one
FIFO slot or scratch round). Values are small integers, exact in float32 whatever the order.
Each rank takes GPU LOCAL_RANK modulo the GPUs (--device cuda, the default) or the CPU
(--device cpu, with Gloo). Prints one line a check and "all results exact" on rank 0; exits 1
on a wrong element, naming the call, the size and the index.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist


def accord_loaded():
    with open("/proc/self/maps") as f:
        return any("libaccord" in line for line in f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        dist.init_process_group(args.backend, device_id=dev if args.backend == "nccl" else None)
    else:
        dev = torch.device("cpu")
        dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    library = "Accord" if accord_loaded() else ("NCCL" if args.backend == "nccl" else "Gloo")
    if rank == 0:
        print(f"torch {torch.__version__}, {world} ranks, backend {args.backend} ({library}), "
              f"device {args.device}", flush=True)
    bad = 0

    def check(name, got, want):
        nonlocal bad
        diff = (got != want).nonzero()
        if diff.numel():
            i = diff[0].item()
            print(f"rank {rank}: {name}: element {i} is {got.flatten()[i].item()}, expected "
                  f"{want.flatten()[i].item()}", flush=True)
            bad += 1

    def values(n, src, salt):
        # rank `src`'s message, known to every rank: small integers
        return ((torch.arange(n, device=dev, dtype=torch.int64) * 7 + src * 3 + salt) % 97).float()

    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for n in (1, 1031, 4 << 20):
        # send/recv around the ring; even ranks send first (blocking calls would deadlock
        # otherwise between two ranks that both send first)
        got = torch.empty(n, device=dev)
        if rank % 2 == 0:
            dist.send(values(n, rank, 1), dst=nxt)
            dist.recv(got, src=prv)
        else:
            dist.recv(got, src=prv)
            dist.send(values(n, rank, 1), dst=nxt)
        check(f"send/recv ring n={n}", got, values(n, prv, 1))

        # isend/irecv to and from every peer at once, as one batch
        ops, recvs = [], {}
        for peer in range(world):
            if peer == rank:
                continue
            recvs[peer] = torch.empty(n, device=dev)
            ops.append(dist.P2POp(dist.isend, values(n, rank, 10 + peer), peer))
            ops.append(dist.P2POp(dist.irecv, recvs[peer], peer))
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        for peer, buf in recvs.items():
            check(f"batch_isend_irecv n={n} from {peer}", buf, values(n, peer, 10 + rank))

        # all_to_all_single, equal splits: block j of rank i's input goes to rank j
        inp = torch.cat([values(n, rank, 100 + j) for j in range(world)])
        out = torch.empty(n * world, device=dev)
        dist.all_to_all_single(out, inp)
        check(f"all_to_all_single n={n}", out, torch.cat([values(n, j, 100 + rank) for j in range(world)]))

        # uneven splits: rank i sends n + i + j elements to rank j
        in_splits = [n + rank + j for j in range(world)]
        out_splits = [n + j + rank for j in range(world)]
        inp = torch.cat([values(in_splits[j], rank, 200 + j) for j in range(world)])
        out = torch.empty(sum(out_splits), device=dev)
        dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)
        want = torch.cat([values(out_splits[j], j, 200 + rank) for j in range(world)])
        check(f"all_to_all_single uneven n={n}", out, want)

        # pre-multiplied sum: every rank's input times 0.5 (exact), summed
        if args.backend == "nccl":
            x = values(n, rank, 300) * 2
            want = sum(values(n, r, 300) for r in range(world))
            dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5))
            check(f"all_reduce premul_sum(0.5) n={n}", x, want)
        if rank == 0:
            print(f"n={n}: send/recv, batch_isend_irecv, all_to_all_single (equal, uneven)"
                  f"{', premul_sum' if args.backend == 'nccl' else ''} checked", flush=True)
    if args.backend != "nccl" and rank == 0:
        print("premul_sum: not checked (the NCCL backend's op; Gloo has none)", flush=True)
    if args.device == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    if bad:
        sys.exit(1)
    if rank == 0:
        print("all results exact", flush=True)


if __name__ == "__main__":
    main()
