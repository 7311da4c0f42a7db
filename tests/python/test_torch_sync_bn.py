"""kfuse.torch.Fused over torch.distributed (NCCL): train-mode batchnorm statistics of every
rank's batch, against torch.nn.SyncBatchNorm, and a training step's gradients against
nn.SyncBatchNorm under DistributedDataParallel. Each test spawns one process per rank; the
one-rank test runs on any CUDA machine, the two-rank test needs two GPUs. Ranks hold batches of
different sizes. Skipped without torch, CUDA or NCCL."""
import contextlib
import copy
import json
import os
import socket

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not dist.is_available() or not dist.is_nccl_available(),
    reason="needs PyTorch with CUDA and NCCL")

IN, OUT = 24, 100  # 100 features: no multiple of 8 or of a tile
ROWS = (37, 150)   # rank r's batch
STEPS = 3

KF = f"""pipeline lin_sync_bn_relu {{
  dim N
  input  x: f32[N, {IN}]
  param  lin_weight: f32[{OUT}, {IN}]
  param  lin_bias: f32[{OUT}]
  param  bn_weight: f32[{OUT}]
  param  bn_bias: f32[{OUT}]
  state  bn_running_mean: f32[{OUT}]
  state  bn_running_var: f32[{OUT}]
  h = linear(x, lin_weight, lin_bias)
  h = batchnorm(h, bn_weight, bn_bias, bn_running_mean, bn_running_var, eps=1e-5, momentum=0.1)
  return relu(h)
}}
"""


class LinSyncBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(IN, OUT)
        self.bn = nn.SyncBatchNorm(OUT)

    def forward(self, x):
        return torch.relu(self.bn(self.lin(x)))


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _rank(rank, world, port, directory):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    try:
        import kfuse.torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.manual_seed(0)  # the same parameters on every rank
        original = LinSyncBnRelu().cuda()
        with torch.no_grad():
            original.bn.weight.uniform_(0.5, 1.5)
            original.bn.bias.uniform_(-0.5, 0.5)
            original.lin.bias.uniform_(-1.0, 1.0)
        kf_file = os.path.join(directory, "lin_sync_bn_relu.kf")
        fused = kfuse.torch.Fused(copy.deepcopy(original), kf_file, precision="fp32")
        assert fused.process_group is not None  # taken from the module's SyncBatchNorm
        report = {"steps": []}
        torch.manual_seed(100 + rank)  # each rank its own batch
        side = torch.cuda.Stream()
        with torch.no_grad():
            for step in range(STEPS):
                x = torch.randn(ROWS[rank], IN, device="cuda") * 2
                # The second step on a stream of its own: the exchange follows the current stream.
                with torch.cuda.stream(side) if step == 1 else contextlib.nullcontext():
                    side.wait_stream(torch.cuda.default_stream())
                    y_ref, y = original(x), fused(x)
                torch.cuda.default_stream().wait_stream(side)
                report["steps"].append({
                    "output": _rel(y, y_ref),
                    "running_mean": _rel(fused.module.bn.running_mean, original.bn.running_mean),
                    "running_var": _rel(fused.module.bn.running_var, original.bn.running_var),
                })
        report["grads"] = _training_step(original, fused, rank, world)
        stats = torch.cat([fused.module.bn.running_mean, fused.module.bn.running_var])
        gathered = [torch.empty_like(stats) for _ in range(world)]
        dist.all_gather(gathered, stats)
        report["ranks_agree"] = all(torch.equal(g, gathered[0]) for g in gathered)
        report["batches_tracked"] = int(fused.module.bn.num_batches_tracked.item())
        report["exchanges"] = fused._ops["train"].pipeline("fp32", x.device).all_gathers_per_run
        report["backward_exchanges"] = fused._training[("train", frozenset())].backward.pipeline("fp32", x.device).all_gathers_per_run
        with open(os.path.join(directory, f"rank{rank}.json"), "w") as f:
            json.dump(report, f)
    finally:
        dist.destroy_process_group()


def _training_step(original, fused, rank, world):
    """One forward and backward of nn.SyncBatchNorm under DDP and of Fused over the same group:
    each rank's input gradient, and the parameter gradients as DDP gives them (Fused's are the
    rank's own sums, which DDP would average: averaged here with an all-reduce), relative to
    PyTorch's; updates the running statistics of both once more."""
    ddp = nn.parallel.DistributedDataParallel(original, device_ids=[rank])
    x = (torch.randn(ROWS[rank], IN, device="cuda") * 2).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    weights = torch.randn(ROWS[rank], OUT, device="cuda")
    (ddp(x_ref) * weights).sum().backward()
    (fused(x) * weights).sum().backward()
    errors = {"x": _rel(x.grad, x_ref.grad)}
    reference = dict(original.named_parameters())
    for name, p in fused.module.named_parameters():
        grad = p.grad.clone()
        dist.all_reduce(grad)
        # The linear's bias before a train-mode batchnorm has a gradient of zero (the ranks' own
        # sums cancel in the average, to rounding): an absolute error there.
        scale = max(reference[name].grad.double().norm().item(), 1.0)
        errors[name] = (grad.double() / world - reference[name].grad.double()).norm().item() / scale
    return errors


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(world, tmp_path):
    (tmp_path / "lin_sync_bn_relu.kf").write_text(KF)
    mp.spawn(_rank, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=True)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


def _check(reports):
    for rank, report in enumerate(reports):
        assert report["exchanges"] == 1
        assert report["backward_exchanges"] == 2  # the means batchnorm's input gradient takes
        for name, error in report["grads"].items():
            assert error <= 1e-4, f"rank {rank}: the gradient of {name}: {report['grads']}"
        assert report["ranks_agree"], f"rank {rank}: running statistics differ between ranks"
        assert report["batches_tracked"] == STEPS + 1  # and the training step's
        for step, errors in enumerate(report["steps"]):
            assert errors["output"] <= 1e-5, f"rank {rank} step {step}: {errors}"
            assert errors["running_mean"] <= 1e-6, f"rank {rank} step {step}: {errors}"
            assert errors["running_var"] <= 1e-6, f"rank {rank} step {step}: {errors}"


def test_one_rank_group_matches_sync_batchnorm(tmp_path):
    _check(_run_ranks(1, tmp_path))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_ranks_match_sync_batchnorm(tmp_path):
    _check(_run_ranks(2, tmp_path))
