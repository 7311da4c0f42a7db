# bench/family.py without a GPU or PyTorch: the family covers what it claims, every chain's .kf
# plans in each of its modes and precisions, the options are refused by name, and the markdown
# table's ratios and geomeans come from the rows.
import importlib.util
import os
import subprocess

import pytest

from conftest import REPO

TOOL = os.environ.get("KFUSE_TOOL", str(REPO / "build" / "kfuse"))
spec = importlib.util.spec_from_file_location("family", REPO / "bench" / "family.py")
family = importlib.util.module_from_spec(spec)
spec.loader.exec_module(family)


def test_the_family_covers_the_classes_sizes_and_widths_it_names():
    chains = family.CHAINS
    assert len(chains) >= 30
    assert len({c.name for c in chains}) == len(chains)
    assert {c.kind for c in chains} == {"light", "heavy", "norm", "reduce", "softmax", "batchnorm", "two_gemms"}
    assert min(c.n for c in chains) == 128 and max(c.n for c in chains) == 32768
    assert {30522, 50257} <= {c.f for c in chains}
    assert any("dropout(" in s for c in chains for s in c.body)
    assert any("groupnorm(" in s for c in chains for s in c.body)
    assert family.Chain("a", "light", 1, 1, 1, ("h = relu(h)",)).modes() == ("eval",)
    assert family.Chain("a", "light", 1, 1, 1, ("h = dropout(h, p=0.1)",)).modes() == ("eval", "train")


@pytest.mark.parametrize("chain", family.CHAINS, ids=lambda c: c.name)
def test_every_chain_plans_in_each_mode_and_precision(tmp_path, chain):
    for dtype, precision in (("f32", "tf32"), ("bf16", "bf16"), ("f32", "bf16")):
        kf = tmp_path / f"{chain.name}_{dtype}.kf"
        kf.write_text(family.kf_text(chain, dtype))
        for mode in chain.modes():
            p = subprocess.run([TOOL, "plan", str(kf), "--mode", mode, "--precision", precision],
                               capture_output=True, text=True)
            assert p.returncode == 0, p.stderr
            assert "k0_" in p.stdout


def test_kf_text_declares_the_chain():
    chain = next(c for c in family.CHAINS if c.name == "mlp_block")
    text = family.kf_text(chain, "bf16")
    assert "  input x: bf16[N, 768]\n" in text
    assert "  param w2: bf16[768, 3072]\n" in text and "  param ln_weight: bf16[768]\n" in text
    assert "  h = linear(x, w1, b1)\n  h = gelu(h)\n" in text and text.endswith("  return h\n}\n")
    lse = family.kf_text(next(c for c in family.CHAINS if c.name == "sigmoid_linear_lse"), "f32")
    assert "  a = sigmoid(x)\n  h = linear(a, w1, b1)\n" in lse


@pytest.mark.parametrize("argv, message", [
    (["--chains", "relu,resnet"], "--chains: 'resnet' is not a chain of the family"),
    (["--precisions", "tf32,fp32"], "--precisions: 'tf32,fp32' must be comma-separated names of tf32, bf16, autocast"),
    (["--modes", ""], "--modes: '' must be comma-separated names of eval, train"),
    (["--iters", "9"], "--iters 9: a median needs at least 10 runs"),
    (["--compile-jobs", "-1"], "--warmup and --compile-jobs must be at least 0"),
])
def test_bad_arguments_are_refused_by_name(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        family.parse_args(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_cases_are_each_chains_modes_at_each_precision():
    args = family.parse_args(["--chains", "relu,bn_relu", "--precisions", "bf16,tf32"])
    assert [(c.name, p, m) for c, p, m in family.cases(args)] == [
        ("relu", "bf16", "eval"), ("relu", "tf32", "eval"), ("bn_relu", "bf16", "eval"), ("bn_relu", "bf16", "train"),
        ("bn_relu", "tf32", "eval"), ("bn_relu", "tf32", "train")]
    args = family.parse_args(["--chains", "bn_relu", "--modes", "train"])
    assert [(p, m) for _, p, m in family.cases(args)] == [("tf32", "train"), ("bf16", "train")]


def row(chain, precision, kfuse, gemms, compile_ms=None, error=None, acc=None):
    r = {"chain": chain, "class": "light", "precision": precision, "mode": "eval", "shape": "8 x 8 -> 8"}
    if error:
        r["error"] = error
        return r
    r.update(kernels=1, check=None if acc is None else {"ratio": acc},
             ms={"kfuse": kfuse, "eager": 2 * kfuse, "gemms": gemms,
                 **({} if compile_ms is None else {"compile": compile_ms})})
    return r


def test_markdown_ratios_geomeans_and_failed_rows():
    text = family.markdown([
        row("a", "tf32", 1.0, 1.0, compile_ms=2.0, acc=0.5),
        row("b", "tf32", 4.0, 1.0, compile_ms=2.0, acc=1.25),
        row("c", "tf32", 0, 0, error="kfuse.Error: no | way"),
        row("d", "bf16", 1.0, 0.5),
    ]).splitlines()
    assert text[2] == "| a | light | 8 x 8 -> 8 | tf32 | eval | 1.000 | 2.000 | 2.000 | 1.000 | 1.00 | 2.00 | 2.00 | 1 | 0.50 |"
    assert text[3] == "| b | light | 8 x 8 -> 8 | tf32 | eval | 4.000 | 8.000 | 2.000 | 1.000 | 4.00 | 0.50 | 2.00 | 1 | 1.25 |"
    assert text[4].startswith("| c | light | 8 x 8 -> 8 | tf32 | eval | failed: kfuse.Error: no \\| way |")
    # The escaped pipe is no cell border: the row has the table's cells.
    assert text[4].replace("\\|", "").count("|") == text[2].count("|")
    assert text[5] == "| d | light | 8 x 8 -> 8 | bf16 | eval | 1.000 | 2.000 | – | 0.500 | 2.00 | – | 2.00 | 1 | – |"
    # geomeans over the cases that ran: kfuse / GEMMs sqrt(1 * 4) = 2, compile / kfuse sqrt(2 * 0.5) = 1.
    assert text[-2] == "| tf32 | 2 | 2.00, 4.00 | 1.00, 0.50 | 2.00 | 1.25 |"
    assert text[-1] == "| bf16 | 1 | 2.00, 2.00 | –, – | 2.00 | – |"


def test_list_runs_without_a_gpu(capsys):
    assert family.main(["--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(family.CHAINS) and out[0].split()[0] == family.CHAINS[0].name
