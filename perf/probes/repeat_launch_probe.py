"""Launch sizes of the package's Triton repeat kernels (``decomps.triton_repeat``) against
Inductor's static kernels, on the harness's integer-repeat rows (docs/findings.md, finding 7).

Usage (CUDA only): ``python -m perf.probes.repeat_launch_probe OUT_DIR``

Per row: the GPU kernels per call (profiler, us) of the forward and the training step compiled
with ``dynamic=False``, stock (``decomps.disabled()``) and with the package; then the package's
forward kernel (``repeat_rows``) and backward kernel (``window_sum_rows``) launched directly with
each ``(elements, max_block_w, num_warps)`` of ``CONFIGS`` (``triton_repeat.launch_config``; a
repeat of the innermost dim alone runs over one row, ``triton_repeat.row_shapes``, where only
``elements`` and ``num_warps`` vary), each result checked against the default launch's
(``torch.equal``; the default forward's against eager's); and two other forms of the forward
(``_variants``, in a 2-d grid of row blocks by column blocks): each output word of ``KW`` copies
written as one wider integer (``repeat_rows_packed``), and Inductor's per-element ``w // KW`` load
(``repeat_rows_index``); and the default forward launch with plain and with streaming stores
(``STREAM``, ``triton_repeat.STREAM_STORE_BYTES``), five interleaved rounds. Writes
``OUT_DIR/repeat_launch_probe.json``.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from perf.probes import kernel_time, probe_main

CL, CONTIGUOUS = torch.channels_last, torch.contiguous_format
REPEAT_ROWS = [
    ((16, 64, 16000), torch.float32, CONTIGUOUS, 2),
    ((16, 64, 16000), torch.bfloat16, CONTIGUOUS, 2),
    ((8, 256, 128, 128), torch.float32, CONTIGUOUS, 2),
    ((8, 256, 128, 128), torch.bfloat16, CONTIGUOUS, 2),
    ((8, 256, 128, 128), torch.float32, CL, 2),
    ((8, 256, 128, 128), torch.bfloat16, CL, 2),
    ((8, 256, 128, 128), torch.bfloat16, CONTIGUOUS, 4),
    ((8, 256, 128, 128), torch.float32, CONTIGUOUS, 4),
    ((2, 32, 64, 64, 64), torch.float32, CONTIGUOUS, 2),
    ((2, 32, 64, 64, 64), torch.bfloat16, CONTIGUOUS, 2),
]
CONFIGS = [(512, 256, 4)] + [(e, b, w) for e in (1024, 2048, 4096, 8192) for b in (512, 1024, 2048, 4096)
                             for w in (4, 8) if b <= e and (w == 4 or e >= 2048)]


_WORD = {(2, 2): tl.uint32, (2, 4): tl.uint64, (4, 2): tl.uint64}  # (itemsize, KW) -> packed word
_BITS = {2: tl.uint16, 4: tl.uint32}


@triton.jit
def repeat_rows_packed(in_ptr, out_ptr, rows, h_in, h_out, w_in,
                       KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, ROWS: tl.constexpr,
                       BLOCK_W: tl.constexpr, BITS: tl.constexpr, WORD: tl.constexpr, SHIFT: tl.constexpr):
    # Output row r of a tensor of its own: w_in words of KW copies of one input element each.
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    plane = r // h_out
    source = (plane // KD) * h_in + (r - plane * h_out) // KH
    wi = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    mask = (r < rows) & (wi < w_in)
    v = tl.load(in_ptr + (source * w_in + wi), mask).to(BITS, bitcast=True).to(WORD)
    word = v | (v << SHIFT)
    if KW == 4:
        word = word | (word << (2 * SHIFT))
    tl.store(out_ptr.to(tl.pointer_type(WORD)) + (r * w_in + wi), word, mask)


@triton.jit
def repeat_rows_index(in_ptr, out_ptr, rows, h_in, h_out, w_in, w_out,
                      KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, ROWS: tl.constexpr,
                      BLOCK_W: tl.constexpr):
    # Inductor's form per row: out[.., w] = in[.., w // KW], a load per output element.
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    plane = r // h_out
    source = (plane // KD) * h_in + (r - plane * h_out) // KH
    w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    mask = (r < rows) & (w < w_out)
    tl.store(out_ptr + (r * w_out + w), tl.load(in_ptr + (source * w_in + w // KW), mask), mask)


def _variants(x, factor, expected) -> dict:
    """The forward as ``repeat_rows_packed`` and ``repeat_rows_index``, programs of 4 KB of output."""
    from decomps import repeats
    from decomps.repeat_kernels import repeated_shape

    x_rows, factors, back = repeats.channels_last_rows(x, [factor] * (x.dim() - 2))
    kd, kh, kw = ([1, 1, 1] + factors)[-3:]
    out = x_rows.new_empty(repeated_shape(x_rows.shape, factors))
    rows = out.numel() // out.shape[-1]
    n = len(factors)
    h_in, h_out = (x_rows.shape[-2], out.shape[-2]) if n >= 2 else (1, 1)
    w_in, w_out = x_rows.shape[-1], out.shape[-1]
    record = {}
    for name, per_program in (("packed", 4096 // x.element_size() // kw), ("index", 4096 // x.element_size())):
        for max_block_w in (256, 512, 1024):
            width = w_in if name == "packed" else w_out
            block_w = min(triton.next_power_of_2(width), max_block_w)
            config = {"KD": kd, "KH": kh, "KW": kw, "ROWS": max(1, per_program // block_w), "BLOCK_W": block_w}
            grid = (triton.cdiv(rows, config["ROWS"]), triton.cdiv(width, block_w))
            if name == "packed":
                if (x.element_size(), kw) not in _WORD:
                    continue
                words = {"BITS": _BITS[x.element_size()], "WORD": _WORD[x.element_size(), kw], "SHIFT": 8 * x.element_size()}
                launch = lambda: repeat_rows_packed[grid](x_rows, out, rows, h_in, h_out, w_in, **config, **words)  # noqa: E731
            else:
                launch = lambda: repeat_rows_index[grid](x_rows, out, rows, h_in, h_out, w_in, w_out, **config)  # noqa: E731
            out.zero_()
            launch()
            assert torch.equal(back(out), expected), (name, max_block_w)
            record[f"{name} {max_block_w}"] = kernel_time(launch)
    return record

def _label(shape, dtype, memory_format, factor) -> str:
    layout = " channels_last" if memory_format is CL else ""
    return f"{tuple(shape)} x{factor} {str(dtype).removeprefix('torch.')}{layout}"


def _compiled_kernels(f, x, g) -> dict:
    compiled = torch.compile(f, dynamic=False)
    leaf = x.detach().requires_grad_()
    step = lambda: torch.autograd.grad(compiled(leaf), leaf, g)  # noqa: E731
    for _ in range(3):
        compiled(x)
        step()
    return {"forward": kernel_time(lambda: compiled(x)), "step": kernel_time(step)}


def _direct(x, g, factor, expected) -> dict:
    """Every launch of ``CONFIGS``, each result checked against the default launch's."""
    from decomps import repeats, triton_repeat

    x_rows, factors, back = repeats.channels_last_rows(x, [factor] * (x.dim() - 2))
    g_rows = repeats.channels_last_rows(g, factors[: x.dim() - 2])[0]
    out = triton_repeat.repeat(x_rows, x_rows.new_empty(g_rows.shape), factors)
    grad = triton_repeat.sum_repeats(g_rows, x_rows.new_empty(x_rows.shape), factors)
    assert torch.equal(back(out), expected)
    reference = {"forward": out.clone(), "backward": grad.clone()}
    record, seen = {}, set()
    # the kernels' shapes: a repeat of the innermost dim alone runs over one row, where configs
    # that differ in max_block_w alone coincide
    narrow, wide, launched = triton_repeat.row_shapes(x_rows.shape, g_rows.shape, factors)
    for elements, max_block_w, warps in CONFIGS:
        for name, kernel, src, dst in (("forward", triton_repeat.repeat, x_rows, out),
                                       ("backward", triton_repeat.sum_repeats, g_rows, grad)):
            rows = math.prod((wide if name == "forward" else narrow)[:-1])
            config = triton_repeat.launch_config(wide[-1], launched, name == "forward", x.element_size(),
                                                 elements, max_block_w, rows=rows)
            key = (name, warps, *config.items())
            if key in seen:
                continue
            seen.add(key)
            launch = lambda: kernel(src, dst, factors, config=config, num_warps=warps)  # noqa: E731
            dst.zero_()
            launch()
            assert torch.equal(dst, reference[name]), (name, elements, max_block_w, warps)
            record[f"{name} {elements} {max_block_w} {warps}"] = kernel_time(launch)
    return record


def _stores(x, factor, expected, rounds: int = 5) -> dict:
    """The default forward launch with plain and with streaming stores (``STREAM``), in
    interleaved rounds: each one's lowest and median kernel time."""
    from decomps import repeats, triton_repeat
    from decomps.repeat_kernels import repeated_shape

    x_rows, factors, back = repeats.channels_last_rows(x, [factor] * (x.dim() - 2))
    out = x_rows.new_empty(repeated_shape(x_rows.shape, factors))
    config = triton_repeat.launch_config(out.shape[-1], factors, True, x.element_size())
    launches = {
        name: (lambda config={**config, "STREAM": stream}: triton_repeat.repeat(x_rows, out, factors, config=config))
        for name, stream in (("plain", False), ("streaming", True))
    }
    times = {name: [] for name in launches}
    for _ in range(rounds):
        for name, launch in launches.items():
            out.zero_()
            launch()
            assert torch.equal(back(out), expected), name
            times[name].append(kernel_time(launch))
    return {name: {"min": min(t), "median": sorted(t)[len(t) // 2]} for name, t in times.items()}


def rows():
    import torch.nn.functional as F

    import decomps

    for shape, dtype, memory_format, factor in REPEAT_ROWS:
        x = torch.randn(shape, device="cuda", dtype=dtype).contiguous(memory_format=memory_format)
        f = lambda x: F.interpolate(x, scale_factor=factor, mode="nearest")  # noqa: E731
        expected = f(x)
        g = torch.randn_like(expected)
        torch._dynamo.reset()
        record = {"row": _label(shape, dtype, memory_format, factor)}
        with decomps.disabled():
            record["stock"] = _compiled_kernels(f, x, g)
        torch._dynamo.reset()
        record["package"] = _compiled_kernels(f, x, g)
        record["variants"] = _variants(x, factor, expected)
        record["direct"] = _direct(x, g, factor, expected)
        record["stores"] = _stores(x, factor, expected)
        record["best"] = {
            d: min((t, k) for k, t in record["direct"].items() if k.startswith(d)) for d in ("forward", "backward")
        }
        yield record["row"], record


def main(argv=None) -> int:
    return probe_main("repeat_launch_probe", rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
