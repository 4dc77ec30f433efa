"""Lowerings of the integer-repeat ops (``decomps.repeat_kernels``): per call site, the
package's Triton kernel or generated code that fuses with its neighbours (CUDA), or generated
code whose loads run in order (CPU).

The Triton kernels (``decomps.triton_repeat``) read and write whole rows with vector accesses and
reach the copy floor where Inductor's kernel does not (x2 bf16 on an H200: forward 82.9 us static
or dynamic, Inductor's 90.9 static and 98 dynamic; docs/findings.md, finding 7). They cost fusion:
the kernel reads a realized input and writes its own output. So a call site runs it only where
nothing would fuse anyway: the input is already a buffer and every user of the result takes
realized inputs (the graph's output, a convolution, a matmul). It is emitted through Inductor's
lowering of user-defined Triton kernels, so the generated code launches it like its own; a static
repeat of the innermost dim alone whose output rows are whole 16-byte vectors keeps generated code,
as fast there (``_rows_only_static``). Elsewhere the op lowers to a pointwise node that Inductor
fuses into its producer and users (an add in an FPN merge).

A cat of a repeat and buffers (a UNet skip connection) is lowered here too (``cat``): the
forward kernel writes each input into its slice of the cat's output (UNet skip cat, x2 bf16
contiguous on an H200: 212 us of kernels static and dynamic, where Inductor writing the realized
repeat into its slice took 226 and 280, and one kernel reading both inputs through masks 303 and
391).

On CPU the op is generated code everywhere, over ranges that keep the C++ backend's loads in
order where the innermost dim repeats (``_split_repeat``).
"""


from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence

import torch

aten = torch.ops.aten

# Whether a static repeat of the innermost dim alone runs the Triton kernel (``_rows_only_static``).
ROWS_ONLY_STATIC_TRITON = False


def _triton_applies(x, factors) -> bool:
    """The Triton kernels apply: an innermost factor they handle, a contiguous input, 32-bit
    indexing (guarded as Inductor guards its own 32-bit kernels), and this torch's user-kernel
    lowering."""
    from torch._higher_order_ops.triton_kernel_wrap import triton_kernel_wrapper_mutation
    from torch._inductor import ir
    from torch._inductor.lowering import lowerings

    from decomps.repeat_kernels import TRITON_INNERMOST_FACTORS

    if factors[-1] not in TRITON_INNERMOST_FACTORS or triton_kernel_wrapper_mutation not in lowerings:
        return False
    size = list(x.get_size())
    if not ir.is_contiguous_strides_for_shape(x.get_layout().stride, size):
        return False
    return _fits_32bit(_product(size) * _product(factors))


def _fits_32bit(numel) -> bool:
    """Whether a kernel over ``numel`` elements indexes in 32 bits, with Inductor's guard for
    its own 32-bit kernels (``SIMDKernel.can_use_32bit_indexing``)."""
    from torch._inductor.utils import expr_fits_within_32bit
    from torch._inductor.virtualized import V

    if not expr_fits_within_32bit(numel):
        return False
    V.graph.sizevars.check_leq(numel, torch.iinfo(torch.int32).max)
    return True


def _users_take_realized_inputs(node) -> bool:
    """Every user is the graph's output or takes realized inputs, looking through the permute
    that turns channels-last rows back (``repeats.channels_last_rows``)."""
    from torch._inductor.lowering import needs_realized_inputs

    return all(
        user.op == "output"
        or user.target in needs_realized_inputs
        or (user.target is aten.permute.default and _users_take_realized_inputs(user))
        for user in node.users
    )


def _strided_view(x):
    """``x`` as a buffer or a strided view of one (a channels-last input permuted to rows,
    ``repeats.channels_last_rows``) where it is one, so that a kernel can read it in place;
    else ``x``."""
    from torch._inductor import ir

    data = x.data if isinstance(x, ir.TensorBox) else x
    if ir.is_storage_and_layout(x) or not isinstance(data, ir.BaseView):
        return x
    if not ir.is_storage_and_layout(data.unwrap_view()):
        return x
    try:
        return ir.TensorBox(ir.ExternKernel.convert_to_reinterpret_view(data))
    except NotImplementedError:
        return x


def runs_op_kernel(x) -> bool:
    """Whether the op being lowered runs its own kernel rather than generated code: its input
    is a buffer and nothing would fuse with its result."""
    from torch._inductor import ir
    from torch._inductor.virtualized import V

    return ir.is_storage_and_layout(x) and _users_take_realized_inputs(V.graph.current_node)


def _triton_call(kernel, src, out, factors, **slice_args):
    """``kernel`` (``decomps.triton_repeat``) as a user-defined Triton kernel of the generated
    code, reading ``src`` and writing ``out`` (``repeat_rows`` into the slice that ``slice_args``
    place, else all of it): Inductor launches it like its own kernels, with no Python dispatch
    on the way."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table, triton_kernel_wrapper_mutation
    from torch._inductor.lowering import lowerings
    from torch._inductor.virtualized import V
    from torch.utils._sympy.functions import CeilDiv

    from decomps import triton_repeat
    from decomps.repeat_kernels import repeated_shape, summed_shape

    forward = kernel is triton_repeat.repeat_rows
    size = list(src.get_size())
    narrow, wide = (size, repeated_shape(size, factors)) if forward else (summed_shape(size, factors), size)
    # One row where the sizes are static; with symbolic ones its masks and offsets carry no
    # divisibility (a cat's slice keeps its rows too)
    if not slice_args and not _symbolic(size):
        narrow, wide, factors = triton_repeat.row_shapes(narrow, wide, factors)
    rows = _product((wide if forward else narrow)[:-1])
    sizevars = V.graph.sizevars
    hint = getattr(sizevars, "optimization_hint", None) or sizevars.size_hint
    # Block sizes and stores from the example sizes: the kernel is exact for any of them (masks).
    itemsize = src.get_dtype().itemsize
    config = triton_repeat.launch_config(hint(wide[-1]), factors, forward, itemsize,
                                         out_bytes=hint(_product(wide)) * itemsize, rows=rows)
    grid = [(triton_repeat.programs(rows, wide[-1], config, forward, CeilDiv), 1, 1)]
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
    if forward:
        kwargs.update({"block_rows": rows, "block_stride": 0, "out_offset": 0} | slice_args)
    lowerings[triton_kernel_wrapper_mutation](
        kernel_idx=kernel_side_table.add_kernel(kernel),
        constant_args_idx=kernel_side_table.add_constant_args(config),
        grid=grid,
        tma_descriptor_metadata={},
        kwargs=kwargs,
    )
    return out


def _empty(size, like):
    from torch._inductor.lowering import empty_strided

    return empty_strided(size, None, dtype=like.get_dtype(), device=like.get_device())


def _own_kernel(kernel: str, x, factors, out_size, triton: bool = True):
    """The Triton kernel ``kernel`` of ``decomps.triton_repeat`` where ``runs_op_kernel``, on
    CUDA, ``triton`` and it applies; else None (generated code)."""
    if not (runs_op_kernel(x) and x.get_device().type == "cuda" and triton and _triton_applies(x, factors)):
        return None
    from decomps import triton_repeat

    return _triton_call(getattr(triton_repeat, kernel), x, _empty(out_size, x), factors)


def _symbolic(sizes) -> bool:
    return any(getattr(s, "free_symbols", None) for s in sizes)


def _rows_only_static(x, factors) -> bool:
    """Static sizes, only the innermost dim repeated, output rows of whole 16-byte vectors: the
    call site keeps generated code, the package's fastest kernel there (x2 (16, 64, 16000) on an
    H200, one process each, median kernels of five rounds: float32 48.4 us, the Triton kernel
    48.8-48.9, stock's 48.2; bfloat16 25.1, 25.2-25.4, 27.3). Rows of a partial vector take the
    Triton kernel over one row (``triton_repeat.row_shapes``; (8, 32, 48001) float32 37.0 against
    stock's 47.9, bfloat16 19.5 against 21.1); docs/design.md, "Kernel choice"."""
    size = list(x.get_size())
    if any(k != 1 for k in factors[:-1]) or _symbolic(size):
        return False
    return int(size[-1]) * factors[-1] * x.get_dtype().itemsize % 16 == 0


def _product(sizes):
    total = 1
    for size in sizes:
        total = total * size
    return total


def upsample_repeat(x, factors: Sequence[int]):
    from torch._inductor.virtualized import V

    from decomps.repeat_kernels import repeated_shape

    x = _strided_view(x)
    out_size = repeated_shape(list(x.get_size()), factors)
    own = _own_kernel("repeat_rows", x, factors, out_size, ROWS_ONLY_STATIC_TRITON or not _rows_only_static(x, factors))
    if own is not None:
        return own
    node = V.graph.current_node
    if any(user.target is aten.cat.default for user in node.users):
        _cat_sources.setdefault(V.graph, {})[node] = (x, list(factors))
    if x.get_device().type == "cpu" and factors[-1] > 1:
        n = len(factors)
        if _users_take_realized_inputs(node):  # one pass over split ranges
            return _split_repeat(x, factors, range(n))
        # the rows repeated into a buffer, the outer dims' repeat fused into the users
        x = _split_repeat(x, [*[1] * (n - 1), factors[-1]], [n - 1])
        factors = [*factors[:-1], 1]
    return _repeat_pointwise(x, factors)


def _repeat_pointwise(x, factors):
    """``out[..., o] = x[..., o // k]``: a pointwise node that fuses with its producer and users."""
    from torch._inductor import ir
    from torch.utils._sympy.functions import FloorDiv

    from decomps.repeat_kernels import repeated_shape

    n = len(factors)
    load = x.make_loader()

    def inner_fn(index):
        spatial = [FloorDiv(i, k) if k > 1 else i for i, k in zip(index[-n:], factors)]
        return load([*index[:-n], *spatial])

    return ir.Pointwise.create(
        device=x.get_device(),
        dtype=x.get_dtype(),
        inner_fn=inner_fn,
        ranges=repeated_shape(list(x.get_size()), factors),
    )


def _split_repeat(x, factors, dims):
    """The repeat of ``dims`` (of the spatial ones) as a buffer computed over ranges that split
    each of them into (size, factor), viewed with the repeated sizes.

    For Inductor's C++ backend: a load at ``o // k`` along the innermost dim is not contiguous,
    so the kernel around it runs unvectorized (its tiling heuristics veto the vector loop),
    while over split ranges the loads and stores run in order. Where the repeat's users would
    fuse it, only the innermost dim is split and realized, half or less of the output, and the
    users read it contiguously along rows (FPN merge bf16 (1, 64, 64, 64), CPU, 1 thread:
    1380 -> 183 us; eager 850 us; docs/perf.md)."""
    from torch._inductor import ir

    from decomps.repeat_kernels import repeated_shape

    size = list(x.get_size())
    n = len(factors)
    lead = len(size) - n
    split = [*size[:lead]]
    for d, (s, k) in enumerate(zip(size[lead:], factors)):
        split += [s, k] if d in dims else [s]
    positions = [lead + d + sum(1 for e in dims if e < d) for d in range(n)]  # of the input's dims
    load = x.make_loader()

    def inner_fn(index):
        return load([*index[:lead], *(index[p] for p in positions)])

    buffer = ir.Pointwise.create(device=x.get_device(), dtype=x.get_dtype(), inner_fn=inner_fn, ranges=split)
    buffer.realize()
    storage, layout = ir.as_storage_and_layout(buffer, freeze=True, want_contiguous=True)
    # Contiguous strides of the repeated sizes, as eager's (a view would give an empty
    # tensor's dims stride 0).
    repeated = repeated_shape(size, [k if d in dims else 1 for d, k in enumerate(factors)])
    strides = ir.FlexibleLayout.contiguous_strides(repeated)
    fixed = ir.FixedLayout(layout.device, layout.dtype, repeated, strides, layout.offset)
    return ir.TensorBox(ir.ReinterpretView(data=storage, layout=fixed))


def upsample_repeat_backward(grad_output, factors: Sequence[int]):
    from torch._inductor import ir
    from torch._inductor.virtualized import ops

    from decomps.repeat_kernels import TRITON_BACKWARD_DTYPES, summed_shape
    from decomps.repeats import accumulation_dtype

    grad_output = _strided_view(grad_output)
    out_size = summed_shape(list(grad_output.get_size()), factors)
    dtype = grad_output.get_dtype()
    own = _own_kernel("window_sum_rows", grad_output, factors, out_size, dtype in TRITON_BACKWARD_DTYPES)
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


# {graph: {repeat op's FX node: (its input, factors)}} for the cat lowering: the FX interpreter
# drops a value once its last user has run, so the cat cannot look the input up by node.
_cat_sources: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cat_slices(inputs, dim):
    """For a cat whose inputs the Triton kernels can write, ``[(src, factors)]`` per input: a
    repeat op's input and factors, or the input itself with factors 1 (a row copy); else None.

    They can where the cat runs on CUDA in one dtype, an input is a repeat op, every input is
    a contiguous buffer (a repeat: its input), and every user of the cat takes realized inputs
    (elsewhere Inductor fuses the cat into its users)."""
    from torch._inductor import ir
    from torch._inductor.virtualized import V

    nodes = _cat_input_nodes(inputs)
    sources = _cat_sources.get(V.graph, {})
    if nodes is None or not any(n in sources for n in nodes):
        return None
    if not _users_take_realized_inputs(V.graph.current_node):
        return None
    if inputs[0].get_device().type != "cuda" or len({x.get_dtype() for x in inputs}) != 1:
        return None
    rank = len(inputs[0].get_size())
    slices = []
    for n, x in zip(nodes, inputs):
        src, factors = sources.get(n, (x, [1]))
        if len(x.get_size()) != rank or not (ir.is_storage_and_layout(src) and _triton_applies(src, factors)):
            return None
        slices.append((src, factors))
    return slices if _fits_32bit(_product(_cat_size(inputs, dim))) else None


def _cat_input_nodes(inputs):
    """The FX nodes of the cat being lowered, one per input (None where this lowering runs for
    another node or an input is not a node)."""
    import torch.fx
    from torch._inductor.virtualized import V

    node = V.graph.current_node
    nodes = node.args[0] if node.target is aten.cat.default and node.args else None
    if nodes is None or len(nodes) != len(inputs) or not all(isinstance(n, torch.fx.Node) for n in nodes):
        return None
    return nodes


def _cat_size(inputs, dim: int) -> list:
    sizes = [list(x.get_size()) for x in inputs]
    return [*sizes[0][:dim], sum(s[dim] for s in sizes), *sizes[0][dim + 1:]]


_stock: dict = {}  # Inductor's own lowering of aten.cat, which ``cat`` wraps


def cat(inputs, dim=0):
    """``aten.cat``, where an input is a repeat op (a UNet skip connection, ``cat([skip, up(x)],
    1)``): per input, the Triton kernel of the repeat (or a row copy) writes into its slice of
    the output. Inductor's own cat writes a realized repeat into its slice with a flat index
    that divides by four sizes, runtime divisions with dynamic shapes (x2 bf16 (8, 256, 128,
    128) into a cat on an H200: 155 us, 98 static, where the Triton kernel takes 85).

    Elsewhere the stock lowering, the repeat ops realized first so that Inductor writes each
    into its slice rather than selecting between the inputs in one kernel."""
    rank = len(inputs[0].get_size()) if inputs else 0
    slices = _cat_slices(inputs, dim % rank) if len(inputs) > 1 and rank else None
    if slices is None:
        for n, x in zip(_cat_input_nodes(inputs) or (), inputs):
            if n.target is torch.ops.decomps.upsample_repeat.default:
                x.realize()
        return _stock["cat"](inputs, dim)
    from decomps import triton_repeat

    dim = dim % rank
    out_size = _cat_size(inputs, dim)
    out = _empty(out_size, inputs[0])
    start = 0
    for (src, factors), x in zip(slices, inputs):
        size = list(x.get_size())
        # the input's slice: blocks of block_rows rows, one per index of the dims before dim
        _triton_call(triton_repeat.repeat_rows, src, out, factors, block_rows=_product(size[dim:-1]),
                     block_stride=_product(out_size[dim:]), out_offset=start * _product(out_size[dim + 1:]))
        start = start + size[dim]
    return out


def lowerings(table: dict) -> dict:
    """``{op: lowering}`` to put into Inductor's lowering ``table`` (``cat`` wraps the table's own)."""
    if table[aten.cat.default] is not cat:
        _stock["cat"] = table[aten.cat.default]
    return {
        torch.ops.decomps.upsample_repeat.default: upsample_repeat,
        torch.ops.decomps.upsample_repeat_backward.default: upsample_repeat_backward,
        aten.cat.default: cat,
    }
