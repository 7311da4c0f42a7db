"""Train-mode forward of the founding chains with batchnorm statistics over every rank's batch:
PyTorch eager with nn.SyncBatchNorm, torch.compile of it, and kfuse.torch.Fused (which
all-gathers per-feature summaries between its kernels), one process per GPU over NCCL,
interleaved, CUDA events, L2 flushed before each call, median of many. Prints a markdown table
(rank 0's times; every rank runs the same work). --train times a training step instead: each
contender inside DistributedDataParallel, forward and backward from a fixed output gradient
(DDP's gradient all-reduce included; the optimizer step is not).

    python3 bench/sync_bn.py [--ranks 2] [--rows 1024] [--iters 50] [--precision tf32] [--train]
"""
import argparse
import copy
import os
import socket
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import compare_torch  # noqa: E402

CASES = ("gemm_bn_scale_softmax", "gemm_scale_bn")
L2_FLUSH_BYTES = 256 << 20


def timed(fn, flush, iters):
    """Per-call GPU milliseconds (events around each call, L2 flushed outside them)."""
    times = []
    for _ in range(iters):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def rank_main(rank, world, port, args, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    import kfuse.torch
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda")
    rows = []
    for case in CASES:
        kf, features, _, chain, _ = compare_torch.CASES[case]
        torch.manual_seed(0)
        module = nn.SyncBatchNorm.convert_sync_batchnorm(compare_torch.make_module(chain, features)).cuda()
        fused = kfuse.torch.Fused(copy.deepcopy(module), REPO / kf, mapping=compare_torch.PARAM_MAP,
                                  precision=args.precision)
        x = torch.randn(args.rows, features, device="cuda")
        compiled = copy.deepcopy(module)
        if args.train:
            module, compiled, fused = (nn.parallel.DistributedDataParallel(m, device_ids=[rank])
                                       for m in (module, compiled, fused))
        contenders = {"eager": module, "torch.compile": torch.compile(compiled), "kfuse": fused}
        grad = torch.randn(args.rows, features, device="cuda")
        contenders = {name: (lambda m=m: m(x).backward(grad)) if args.train else (lambda m=m: m(x))
                      for name, m in contenders.items()}
        times = {name: [] for name in contenders}
        with torch.set_grad_enabled(args.train):
            for _ in range(3):  # compile, first calls: not timed
                for fn in contenders.values():
                    fn()
            for _ in range(args.iters // 10):  # interleaved in rounds of 10 calls each
                for name, fn in contenders.items():
                    times[name] += timed(fn, flush, 10)
        rows.append({"case": case, **{name: statistics.median(t) for name, t in times.items()}})
    if rank == 0:
        results.extend(rows)
        print(f"| case | ranks | rows per rank | precision | eager ms | torch.compile ms | kfuse ms | "
              f"eager / kfuse | compile / kfuse |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['case']} | {world} | {args.rows} | {args.precision} | {r['eager']:.3f} | "
                  f"{r['torch.compile']:.3f} | {r['kfuse']:.3f} | {r['eager'] / r['kfuse']:.2f} | "
                  f"{r['torch.compile'] / r['kfuse']:.2f} |", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=torch.cuda.device_count())
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--precision", default="tf32", choices=("fp32", "tf32"))
    ap.add_argument("--train", action="store_true", help="time forward + backward under DDP")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    what = ("forward + backward under DistributedDataParallel" if args.train
            else "forward under torch.no_grad()")
    print(f"Command: `python3 bench/sync_bn.py --ranks {args.ranks} --rows {args.rows} --iters {args.iters} "
          f"--precision {args.precision}{' --train' if args.train else ''}` on {torch.cuda.get_device_name(0)}; "
          f"train mode, {what}; median ms per call on rank 0\n")
    mp.spawn(rank_main, args=(args.ranks, port, args, []), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
