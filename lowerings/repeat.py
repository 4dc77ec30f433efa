"""Lowerings of the integer-repeat ops (``decomps.repeat_kernels``): per call site, the
package's Triton kernel or generated code that fuses with its neighbours.

The Triton kernels (``decomps.triton_repeat``) read and write whole rows with vector accesses
and reach the copy floor where Inductor's kernel does not (x2 bf16 on an H200, dynamic shapes:
forward 84 vs 98 us, backward 81 vs 94 us; docs/findings.md, finding 7). They cost fusion: the
kernel reads a realized input and writes its own output. So a call site runs it only where
nothing would fuse anyway: the input is already a buffer and every user of the result takes
realized inputs (the graph's output, a convolution, a matmul). It is emitted through Inductor's
lowering of user-defined Triton kernels, so the generated code launches it like its own.
Elsewhere the op lowers to a pointwise node that Inductor fuses into its producer and users (an
add in an FPN merge).

A forward used by ``cat`` is realized on its own: Inductor then writes it straight into its
slice of the cat's output and copies the other inputs (UNet skip cat, x2 bf16 contiguous on an
H200: 226 us static and 280 dynamic, where the one-kernel cat that reads both inputs through
masks took 303 and 391).

On other devices (tests reach them through ``kernel_choice.REPEAT_KERNEL_DEVICES``) the op's own
kernel, the views, runs as an extern call where the Triton kernel would.
"""


from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

aten = torch.ops.aten


def _triton_applies(x, factors) -> bool:
    """The Triton kernels apply: an innermost factor they handle, a contiguous input, 32-bit
    indexing (guarded as Inductor guards its own 32-bit kernels), and this torch's user-kernel
    lowering."""
    from torch._higher_order_ops.triton_kernel_wrap import triton_kernel_wrapper_mutation
    from torch._inductor import ir
    from torch._inductor.lowering import lowerings
    from torch._inductor.virtualized import V

    from decomps.repeat_kernels import TRITON_INNERMOST_FACTORS

    if factors[-1] not in TRITON_INNERMOST_FACTORS or triton_kernel_wrapper_mutation not in lowerings:
        return False
    from torch._inductor.utils import expr_fits_within_32bit

    size = list(x.get_size())
    if not ir.is_contiguous_strides_for_shape(x.get_layout().stride, size):
        return False
    wide = _product(size) * _product(factors)
    if not expr_fits_within_32bit(wide):
        return False
    # SIMDKernel.can_use_32bit_indexing's guard
    V.graph.sizevars.check_leq(wide, torch.iinfo(torch.int32).max)
    return True


def _users_take_realized_inputs(node) -> bool:
    from torch._inductor.lowering import needs_realized_inputs

    return all(user.op == "output" or user.target in needs_realized_inputs for user in node.users)


def runs_op_kernel(x) -> bool:
    """Whether the op being lowered runs its own kernel rather than generated code: its input
    is a buffer and nothing would fuse with its result."""
    from torch._inductor import ir
    from torch._inductor.virtualized import V

    return ir.is_storage_and_layout(x) and _users_take_realized_inputs(V.graph.current_node)


def _extern(op, x, factors):
    from torch._inductor.lowering import fallback_handler

    return fallback_handler(op, add_to_fallback_set=False)(x, factors)


def _triton_call(kernel, src, out_size, factors):
    """``kernel`` (``decomps.triton_repeat``) as a user-defined Triton kernel of the generated
    code: Inductor launches it like its own kernels, with no Python dispatch on the way."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table, triton_kernel_wrapper_mutation
    from torch._inductor.lowering import empty_strided, lowerings
    from torch._inductor.virtualized import V
    from torch.utils._sympy.functions import CeilDiv

    from decomps import triton_repeat

    out = empty_strided(out_size, None, dtype=src.get_dtype(), device=src.get_device())
    forward = kernel is triton_repeat.repeat_rows
    in_size = list(src.get_size())
    narrow, wide = (in_size, out_size) if forward else (out_size, in_size)
    sizevars = V.graph.sizevars
    hint = getattr(sizevars, "optimization_hint", None) or sizevars.size_hint
    # Block sizes from the example sizes: the kernel is exact for any of them (masks).
    config = triton_repeat.launch_config(hint(wide[-1]), factors, forward)
    rows = _product(out_size[:-1])
    grid = [(CeilDiv(rows, config["ROWS"]), CeilDiv(wide[-1], config["BLOCK_W"] * (1 if forward else factors[-1])), 1)]
    n = len(factors)
    kwargs = {
        "in_ptr" if forward else "g_ptr": src,
        "out_ptr": out,
        "rows": rows,
        "h_in": narrow[-2] if n >= 2 else 1,
        "h_out": wide[-2] if n >= 2 else 1,
        "w_in": narrow[-1],
        "w_out": wide[-1],
    }
    lowerings[triton_kernel_wrapper_mutation](
        kernel_idx=kernel_side_table.add_kernel(kernel),
        constant_args_idx=kernel_side_table.add_constant_args(config),
        grid=grid,
        tma_descriptor_metadata={},
        kwargs=kwargs,
    )
    return out


def _own_kernel(op, kernel: str, x, factors, out_size, triton: bool = True):
    """The op's own kernel where ``runs_op_kernel``: on CUDA the Triton kernel ``kernel`` of
    ``decomps.triton_repeat`` where ``triton`` and it applies, elsewhere an extern call of the
    op; else None (generated code)."""
    if not runs_op_kernel(x):
        return None
    if x.get_device().type != "cuda":
        return _extern(op, x, factors)
    if not (triton and _triton_applies(x, factors)):
        return None
    from decomps import triton_repeat

    return _triton_call(getattr(triton_repeat, kernel), x, out_size, factors)


def _product(sizes):
    total = 1
    for size in sizes:
        total = total * size
    return total


def upsample_repeat(x, factors: Sequence[int]):
    from torch._inductor import ir
    from torch._inductor.virtualized import V
    from torch.utils._sympy.functions import FloorDiv

    from decomps.repeat_kernels import repeated_shape

    out_size = repeated_shape(list(x.get_size()), factors)
    own = _own_kernel(torch.ops.decomps.upsample_repeat.default, "repeat_rows", x, factors, out_size)
    if own is not None:
        return own
    n = len(factors)
    load = x.make_loader()

    def inner_fn(index):
        spatial = [FloorDiv(i, k) if k > 1 else i for i, k in zip(index[-n:], factors)]
        return load([*index[:-n], *spatial])

    out = ir.Pointwise.create(
        device=x.get_device(),
        dtype=x.get_dtype(),
        inner_fn=inner_fn,
        ranges=out_size,
    )
    if any(user.target is aten.cat.default for user in V.graph.current_node.users):
        out.realize()
    return out


def upsample_repeat_backward(grad_output, factors: Sequence[int]):
    from torch._inductor import ir
    from torch._inductor.virtualized import ops

    from decomps.repeat_kernels import TRITON_BACKWARD_DTYPES, summed_shape
    from decomps.repeats import accumulation_dtype

    out_size = summed_shape(list(grad_output.get_size()), factors)
    dtype = grad_output.get_dtype()
    op = torch.ops.decomps.upsample_repeat_backward.default
    own = _own_kernel(op, "window_sum_rows", grad_output, factors, out_size, dtype in TRITON_BACKWARD_DTYPES)
    if own is not None:
        return own
    n = len(factors)
    acc = accumulation_dtype(dtype)
    load = grad_output.make_loader()

    def inner_fn(index):
        total = None
        # eager's order: window rows first, columns innermost, from the first element
        for offsets in itertools.product(*(range(k) for k in factors)):
            spatial = [i * k + j for i, k, j in zip(index[-n:], factors, offsets)]
            value = ops.to_dtype(load([*index[:-n], *spatial]), acc)
            total = value if total is None else ops.add(total, value)
        return ops.to_dtype(total, dtype)

    return ir.Pointwise.create(
        device=grad_output.get_device(),
        dtype=dtype,
        inner_fn=inner_fn,
        ranges=out_size,
    )


def lowerings() -> dict:
    """``{op: lowering}`` for Inductor's lowering table."""
    return {
        torch.ops.decomps.upsample_repeat.default: upsample_repeat,
        torch.ops.decomps.upsample_repeat_backward.default: upsample_repeat_backward,
    }
