"""The case matrix: pure, valid, and buildable (on the meta device for CUDA shapes)."""

import math
import re
from collections import Counter
from dataclasses import replace

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import is_concrete_int

from perf.bench import FPNNeck, LateralOnlyNeck, build_workload, compare_results
from perf.cases import (
    CALL_FORMS,
    FLOAT_DTYPES,
    FUSED_KINDS,
    MODES,
    Case,
    is_training_step,
    make_cases,
    min_bytes,
    scaled_size,
)


def _all_option_combinations():
    for device in ("cpu", "cuda"):
        for quick in (True, False):
            for backward in (True, False):
                yield device, quick, backward


@pytest.mark.parametrize("device,quick,backward", list(_all_option_combinations()))
def test_case_list_is_valid(device, quick, backward):
    cases = make_cases(device, quick=quick, backward=backward)
    assert cases
    assert make_cases(device, quick=quick, backward=backward) == cases  # pure
    assert all(c.device == device for c in cases)
    # Every row is addressable: unique names, unique sub_labels within a label.
    assert len({c.name for c in cases}) == len(cases)
    assert not [k for k, n in Counter((c.label, c.sub_label) for c in cases).items() if n > 1]
    for c in cases:
        spatial = c.shape[2:]
        assert len(spatial) in (1, 2, 3)
        if c.kind == "fpn_neck":
            assert [s[1] for s in c.neck_level_shapes] == [64, 128, 256, 512]
            continue
        assert len(c.osize) == len(spatial)
        if c.scale_factor is not None:
            assert c.osize == scaled_size(spatial, c.scale_factor)
        assert min_bytes(c) > 0
    if backward:
        assert {c.dtype for c in cases if c.backward} <= set(FLOAT_DTYPES)
        assert any(c.backward for c in cases)
    else:
        assert not any(c.backward for c in cases)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_quick_is_a_subset_of_the_full_matrix(device):
    full = set(make_cases(device, backward=True))
    quick = make_cases(device, quick=True, backward=True)
    assert set(quick) <= full
    assert len(quick) < len(full) / 4


def test_full_matrix_has_the_seed_and_the_added_rows():
    cpu, cuda = make_cases("cpu"), make_cases("cuda")
    seed = ("Input (1, 3, 500, 400), torch.uint8, torch.contiguous_format | "
            "mode: nearest, align_corners: None, osize: (256, 256)")
    assert any(c.label == "Interpolate, cpu" and c.sub_label == seed for c in cpu)
    assert {(c.shape[2:], c.osize) for c in cuda if c.shape[:2] in ((1, 3), (4, 3))} == {
        ((2345, 2456), (1234, 1345)), ((1234, 1345), (2345, 2456))}
    assert {c.dtype for c in cuda} == {"float32", "float16", "bfloat16"}
    assert {"uint8", "float32"} <= {c.dtype for c in cpu}
    assert any(c.shape == (8, 64, 200, 200) and c.osize == (300, 300) and c.dtype == "float16" for c in cuda)
    assert {c.scale_factor for c in cuda if c.shape == (8, 256, 128, 128) and c.kind == "interp"} == {2.0, 4.0}
    assert {c.osize for c in cuda if c.shape == (2, 32, 64, 64, 64)} == {(128, 128, 128), (96, 96, 96)}
    assert any(c.shape == (16, 64, 16000) and c.osize == (32000,) for c in cpu)
    assert {c.kind for c in cuda} == {"interp", "fpn_merge", "unet_skip", "fpn_neck"}
    assert {c.dtype for c in cuda if c.kind == "fpn_neck"} == {"float32", "bfloat16"}
    # Fused consumers on CUDA move >= 64 MB of output.
    assert all(math.prod(c.output_shape) * 2 >= 64 * 2**20 for c in cuda if c.kind in ("fpn_merge", "unet_skip"))
    assert {c.mode for c in cpu} == set(MODES)
    assert {c.mode for c in make_cases("cpu", modes=("nearest-exact",))} == {"nearest-exact"}


def test_bad_options_are_rejected():
    with pytest.raises(ValueError):
        make_cases("mps")
    with pytest.raises(ValueError):
        make_cases("cpu", modes=("bilinear",))
    with pytest.raises(ValueError):
        make_cases("cpu", call_forms=("static",))
    with pytest.raises(ValueError):
        make_cases("cpu", call_forms=())


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("quick", [True, False])
def test_rows_called_with_size_come_in_both_call_forms(device, quick):
    cases = make_cases(device, quick=quick, backward=True)
    with_size = [c for c in cases if c.kind == "interp" and c.scale_factor is None]
    literal = [c for c in cases if c.call_form == "literal"]
    assert with_size and {c.call_form for c in with_size} == set(CALL_FORMS)
    assert set(literal) == {replace(c, call_form="literal") for c in with_size}
    for c in literal:  # the symbolic twin keeps the seed's sub_label; the literal row appends to it
        assert c.sub_label == replace(c, call_form="symbolic").sub_label + ", size: literal"
    assert any(c.backward for c in literal)
    for form in CALL_FORMS:
        assert make_cases(device, quick=quick, backward=True, call_forms=(form,)) == [
            c for c in cases if c.kind != "interp" or c.scale_factor is not None or c.call_form == form]


def _traced_sizes(fn, x):
    """The input's and the output's sizes in the graph that Dynamo traces with dynamic=True."""
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=record, fullgraph=True, dynamic=True)(x)
    (graph,) = graphs
    (placeholder,) = [n for n in graph.graph.nodes if n.op == "placeholder" and "example_value" in n.meta
                      and isinstance(n.meta["example_value"], torch.Tensor)]
    (output,) = graph.graph.find_nodes(op="output")
    return tuple(placeholder.meta["example_value"].shape), tuple(output.args[0][0].meta["example_value"].shape)


def _is_symbol(size) -> bool:
    # No comparison with the SymInt: it would specialize it.
    return isinstance(size, torch.SymInt) and not is_concrete_int(size)


@pytest.mark.parametrize("size", [(7, 6), (3, 2)])
def test_literal_size_is_traced_as_a_constant_and_the_closure_size_as_a_symbol(size):
    case = Case("interp", "cpu", (1, 3, 5, 4), "float32", osize=size)
    for form, static_output in (("literal", True), ("symbolic", False)):
        work = build_workload(replace(case, call_form=form))
        in_shape, out_shape = _traced_sizes(work.forward, *work.args)
        assert all(_is_symbol(s) for s in in_shape[1:]), (form, in_shape)  # size 1 is specialized
        if static_output:
            assert all(type(s) is int for s in out_shape[2:]) and out_shape[2:] == size, (form, out_shape)
        else:
            assert all(_is_symbol(s) for s in out_shape[2:]), (form, out_shape)
        assert work.forward(*work.args).shape == (1, 3, *size)


def test_min_bytes_counts_only_sampled_input_and_the_output():
    down = Case("interp", "cuda", (1, 3, 500, 400), "float32", osize=(256, 256))
    assert min_bytes(down) == 4 * 3 * (256 * 256 + 256 * 256)  # only 256 sampled rows and cols read
    up = Case("interp", "cuda", (1, 3, 300, 400), "uint8", osize=(600, 200))
    assert min_bytes(up) == 3 * (300 * 200 + 600 * 200)
    bwd = replace(up, dtype="bfloat16", backward=True)
    assert min_bytes(bwd) == 2 * 3 * (300 * 200 + 600 * 200) + 2 * 3 * (600 * 200 + 300 * 400)
    merge = Case("fpn_merge", "cuda", (2, 4, 8, 8), "bfloat16", osize=(16, 16), scale_factor=2.0)
    assert min_bytes(merge) == 2 * (2 * 4 * 64 + 2 * 2 * 4 * 256)
    skip = replace(merge, kind="unet_skip")
    assert min_bytes(skip) == 2 * (2 * 4 * 64 + 2 * 4 * 256 + 2 * 8 * 256)
    assert min_bytes(Case("fpn_neck", "cuda", (1, 64, 32, 32), "float32")) is None


def test_min_bytes_of_fused_fwd_bwd_rows_add_the_backward():
    """Backward: the upsampled part of grad_output read + the low-resolution grad written; the
    full-resolution grad is a view of grad_output (add: itself, cat: a slice)."""
    merge = Case("fpn_merge", "cuda", (2, 4, 8, 8), "bfloat16", osize=(16, 16), scale_factor=2.0, backward=True)
    top, lateral = 2 * 4 * 64, 2 * 4 * 256
    forward = 2 * (top + lateral + lateral)  # top and lateral read, output written
    assert min_bytes(merge) == forward + 2 * (lateral + top)
    skip = replace(merge, kind="unet_skip")
    out = 2 * 4 * 2 * 256  # cat doubles the channels
    assert min_bytes(skip) == 2 * (top + lateral + out) + 2 * (lateral + top)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_case_builds_and_runs_on_meta(device):
    for case in make_cases(device, backward=True):
        work = build_workload(replace(case, device="meta"))
        outputs = work.runner(work.forward)(*work.args)
        if case.kind == "fpn_neck":
            assert len(outputs) == len(work.wrt)  # grads for every parameter and input level
        elif case.backward and case.kind in FUSED_KINDS:  # grads of the full-resolution input and of top
            assert [g.shape for g in outputs] == [(*case.shape[:2], *case.osize), case.shape]
        elif case.backward:
            assert outputs[0].shape == case.shape
        else:
            assert outputs.shape == case.output_shape
            assert outputs.dtype == getattr(torch, case.dtype)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("quick", [True, False])
def test_fused_rows_get_fwd_bwd_twins_with_backward(device, quick):
    forward = [c for c in make_cases(device, quick=quick) if c.kind in FUSED_KINDS]
    cases = make_cases(device, quick=quick, backward=True)
    fused_bwd = [c for c in cases if c.kind in FUSED_KINDS and c.backward]
    assert forward and fused_bwd == [replace(c, backward=True) for c in forward if c.dtype in FLOAT_DTYPES]
    for c in fused_bwd:
        assert c.label == f"Interpolate fused consumer fwd+bwd, {device}"
        assert c.name.startswith(f"{c.kind}+bwd {c.mode} ")
    if quick and device == "cpu":  # the quick CPU run keeps its one fused row, now also fwd+bwd
        assert {(c.kind, c.memory_format) for c in fused_bwd} == {("fpn_merge", "contiguous_format")}
    filtered = [c for c in cases if re.search(r"fpn_merge\+bwd", c.name)]  # as --filter matches
    assert filtered == [c for c in fused_bwd if c.kind == "fpn_merge"]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_training_step_labels(device):
    """The labels of the rows that time forward + backward say so (the speed-up table's rule)."""
    cases = make_cases(device, backward=True)
    assert {is_training_step(c.label) for c in cases} == {True, False}
    for c in cases:
        assert is_training_step(c.label) == (c.backward or c.kind == "fpn_neck"), c.label


def test_fused_fwd_bwd_workload_differentiates_both_inputs():
    case = Case("fpn_merge", "cpu", (1, 2, 4, 4), "bfloat16", osize=(8, 8), scale_factor=2.0, backward=True)
    for kind in FUSED_KINDS:
        work = build_workload(replace(case, kind=kind))
        assert work.wrt == work.args and all(x.requires_grad for x in work.args)
        assert work.check == "allclose" and len(work.grad_outputs) == 1
        (grad_output,) = work.grad_outputs
        assert grad_output.shape == replace(case, kind=kind).output_shape and grad_output.std() > 0  # random
        full_res, low_res = work.runner(work.forward)(*work.args)
        low_part = grad_output[:, :2] if kind == "fpn_merge" else grad_output[:, 2:]
        expected = low_part.float().unflatten(3, (4, 2)).unflatten(2, (4, 2)).sum((3, 5))  # 2x2 blocks
        torch.testing.assert_close(full_res, grad_output[:, :2])
        torch.testing.assert_close(low_res.float(), expected, rtol=4e-2, atol=4e-2)


def test_lateral_only_neck_is_the_neck_without_its_top_down_path():
    """Each level of the lower-bound neck is the output convolution of its lateral convolution;
    the coarsest level, which no upsampling reaches, is the full neck's."""
    torch.manual_seed(0)
    levels = ((1, 4, 8, 8), (1, 8, 4, 4), (1, 16, 2, 2))
    neck = FPNNeck(tuple(s[1] for s in levels), 6, "nearest")
    lateral_only = LateralOnlyNeck(tuple(s[1] for s in levels), 6, "nearest")
    lateral_only.load_state_dict(neck.state_dict())
    features = [torch.randn(s) for s in levels]
    with torch.no_grad():
        outputs, full = lateral_only(*features), neck(*features)
        for i, x in enumerate(features):
            assert torch.equal(outputs[i], neck.output[i](neck.lateral[i](x)))
    assert torch.equal(outputs[-1], full[-1])
    assert not torch.equal(outputs[0], full[0])


def test_quick_cpu_cases_run_eagerly():
    for case in make_cases("cpu", quick=True):
        work = build_workload(case)
        result = work.runner(work.forward)(*work.args)
        assert compare_results(result, result, work.check, case.dtype) is None


def test_compare_results_reports_differences():
    x = torch.arange(6.0).reshape(2, 3)
    y = x.clone()
    y[1, 2] += 1
    assert "1 of 6 elements differ" in compare_results(y, x, "equal", "float32")
    assert compare_results(x + 1e-7, x, "allclose", "float32") is None
    assert compare_results(x + 1e-2, x, "allclose", "float32") is not None
    assert compare_results((x, x), (x,), "equal", "float32") is not None
    assert compare_results(x.half(), x, "equal", "float32") is not None


def test_a_fused_fwd_bwd_row_compiles_and_matches_eager():
    """A tiny fwd+bwd FPN merge through ``run_case``: compiled gradients within the bf16 tolerance,
    and the roofline counts the backward's bytes."""
    from perf import bench

    case = Case("fpn_merge", "cpu", (1, 2, 4, 4), "bfloat16", osize=(8, 8), scale_factor=2.0, backward=True)
    result = bench.run_case(case, "PR", dynamic=True, num_threads=1, min_run_time=0.01, copy_gbps=100.0)
    assert result.problems == {}
    assert [m.task_spec.description.split(" (")[0] for m in result.measurements] == ["Eager", "Compiled"]
    assert {m.task_spec.label for m in result.measurements} == {"Interpolate fused consumer fwd+bwd, cpu"}
    assert {r["bytes"] for r in result.roofline.values()} == {min_bytes(case)}
