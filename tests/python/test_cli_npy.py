"""`kfuse run F.kf --inputs DIR` on files numpy.save writes: the results come back as .npy files
numpy.load reads, equal to a float64 NumPy reference. Without a GPU the files are still read
and checked (the run then stops at the driver); bad files are refused naming file and dtype."""
import os
import subprocess

import numpy as np
import pytest

from conftest import REPO

TOOL = os.environ.get("KFUSE_TOOL", str(REPO / "build" / "kfuse"))
pytestmark = pytest.mark.skipif(not os.path.exists(TOOL), reason=f"no kfuse tool at {TOOL} (build it or set KFUSE_TOOL)")

KF = """pipeline scale_bn_small {
  dim N
  input  x: f32[N, 8]
  param  weight: f32[8, 8]
  param  bias: f32[8]
  param  scale: f32[8]
  param  bn_weight: f32[8]
  param  bn_bias: f32[8]
  state  running_mean: f32[8]
  state  running_var: f32[8]
  h = linear(x, weight, bias)
  h = mul(h, scale)
  return batchnorm(h, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, momentum=0.1)
}
"""
N = 16


@pytest.fixture
def case(tmp_path):
    kf = tmp_path / "scale_bn_small.kf"
    kf.write_text(KF)
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(1)
    tensors = {
        "x": rng.standard_normal((N, 8)),
        "weight": rng.standard_normal((8, 8)) / np.sqrt(8),
        "bias": rng.standard_normal(8),
        "scale": rng.uniform(0.5, 1.5, 8),
        "bn_weight": rng.uniform(0.5, 1.5, 8),
        "bn_bias": rng.standard_normal(8),
        "running_mean": rng.standard_normal(8),
        "running_var": rng.uniform(0.5, 1.5, 8),
    }
    for name, t in tensors.items():
        np.save(data / f"{name}.npy", t.astype(np.float32))
    return kf, data, {k: v.astype(np.float32).astype(np.float64) for k, v in tensors.items()}


def run(*args):
    return subprocess.run([TOOL, "run", *map(str, args)], capture_output=True, text=True)


def reference(t, steps):
    """PyTorch's train-mode linear -> * scale -> BatchNorm1d, in float64."""
    h = (t["x"] @ t["weight"].T + t["bias"]) * t["scale"]
    mean, var = h.mean(0), h.var(0)
    out = (h - mean) / np.sqrt(var + 1e-5) * t["bn_weight"] + t["bn_bias"]
    rm, rv = t["running_mean"], t["running_var"]
    for _ in range(steps):
        rm, rv = 0.9 * rm + 0.1 * mean, 0.9 * rv + 0.1 * h.var(0, ddof=1)
    return out, rm, rv


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def test_numpy_files_in_npy_files_out(case):
    kf, data, t = case
    r = run(kf, "--inputs", data, "--steps", 2, "--reference")
    if "CUDA driver unavailable" in r.stderr:  # read and checked; nothing to run on
        assert r.returncode == 1 and "kfuse run: error: CUDA driver unavailable" in r.stderr, r.stderr
        pytest.skip("no GPU: the files were accepted, the run needs one")
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    out, rm, rv = reference(t, steps=2)
    got = np.load(data / "out0.npy")
    assert got.shape == (N, 8) and got.dtype == np.float32
    assert rel(got, out) < 1e-5
    assert rel(np.load(data / "running_mean.out.npy"), rm) < 1e-5
    assert rel(np.load(data / "running_var.out.npy"), rv) < 1e-5
    assert f"wrote {data}/out0.npy" in r.stdout


def test_bad_files_are_refused_naming_the_file(case):
    kf, data, t = case
    np.save(data / "weight.npy", t["weight"])  # float64
    r = run(kf, "--inputs", data)
    assert r.returncode == 1
    assert f"{data}/weight.npy: dtype '<f8' (8, 8); kfuse reads float32 ('<f4')" in r.stderr

    np.save(data / "weight.npy", t["weight"].astype(np.float32))
    np.save(data / "x.npy", np.zeros((N, 7), np.float32))
    r = run(kf, "--inputs", data)
    assert "tensor 'x' must be f32[N, 8], got shape [16, 7]" in r.stderr

    np.save(data / "x.npy", np.zeros((N, 8), np.float32))
    r = run(kf, "--inputs", data, "--dim", "N=4")
    assert f"--dim N=4 but the files in {data} bind N=16" in r.stderr

    os.remove(data / "bias.npy")
    r = run(kf, "--inputs", data)
    assert f"{data}/bias.npy: no such file; --inputs DIR reads every input, param and state of 'scale_bn_small'" in r.stderr


LOSS = """pipeline loss {
  dim N
  input  x: f32[N, 5]
  input  target: i64[N]
  return cross_entropy(x, target, reduction="none")
}
"""


def test_class_indices_are_int64_files(tmp_path):
    kf = tmp_path / "loss.kf"
    kf.write_text(LOSS)
    data, saved = tmp_path / "data", tmp_path / "saved"
    data.mkdir()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    target = np.array([3, 0, -100, 4, 1, 2], np.int64)
    np.save(data / "x.npy", x)
    np.save(data / "target.npy", target)
    r = run(kf, "--inputs", data, "--save", saved, "--reference")
    if "CUDA driver unavailable" in r.stderr:
        assert r.returncode == 1 and "kfuse run: error: CUDA driver unavailable" in r.stderr, r.stderr
        pytest.skip("no GPU: the files were accepted, the run needs one")
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    lse = np.log(np.exp(x.astype(np.float64)).sum(1))
    want = np.where(target == -100, 0.0, lse - x[np.arange(6), np.clip(target, 0, 4)])
    assert rel(np.load(saved / "out0.npy"), want) < 1e-5
    kept = np.load(saved / "target.npy")
    assert kept.dtype == np.int64 and (kept == target).all()


def test_class_indices_and_floats_are_not_interchangeable(tmp_path):
    kf = tmp_path / "loss.kf"
    kf.write_text(LOSS)
    np.save(tmp_path / "x.npy", np.zeros((4, 5), np.float32))
    np.save(tmp_path / "target.npy", np.zeros(4, np.float32))
    r = run(kf, "--inputs", tmp_path)
    assert r.returncode == 1
    assert (f"{tmp_path}/target.npy: floating-point data for class indices 'target', declared i64[N]; "
            "np.save(path, a.astype(np.int64))") in r.stderr
    np.save(tmp_path / "target.npy", np.zeros(4, np.int64))
    np.save(tmp_path / "x.npy", np.zeros((4, 5), np.int64))
    r = run(kf, "--inputs", tmp_path)
    assert r.returncode == 1
    assert f"{tmp_path}/x.npy: int64 data for tensor 'x', declared f32[N, 5]" in r.stderr
