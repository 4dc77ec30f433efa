"""The host's part of a compiled forward call, the package's against stock's (docs/findings.md,
finding 8, "host-bound forwards").

Usage: ``python -m perf.probes.call_host_probe OUT_DIR [--stock] [--device cuda|cpu] [--rounds R]
[--calls C] [--static]``

For the harness's host-bound forwards (``ROWS``, ``dynamic=True``) in both call forms (``literal``:
``F.interpolate(x, size=(...))`` with the size written as constants; ``symbolic``: ``size``
through a kwargs dict, as the harness passes it), or with ``--static`` for the harness's cases
``STATIC_CASES`` as the harness builds them (``perf.bench.build_workload``), compiled with
``dynamic=False`` and timed against a static empty call: the compiled call's time back to back (us per
call, ``R`` rounds interleaved with an empty compiled call, ``x + 1`` on 8 elements, whose
time is the host's cost of any compiled call in that round) and the Python function calls per
call (``cProfile``, a count that the host's load does not move). ``--stock`` runs stock torch: the
package is never imported in that process. Each compiled result is checked against eager's (its
strides too, for the package). Writes ``OUT_DIR/call_host_probe-<pr|stock>.json`` and prints one
line per row.
"""

from __future__ import annotations

import statistics

from perf.probes import back_to_back_us, profiled, tag_probe_main

# (input shape, output size, mode, dtype, channels_last): forwards that the harness marks
# host-bound on an H200 and that its Nightly-before-PR runs had put behind Nightly.
ROWS = [
    ((1, 3, 2345, 2456), (1234, 1345), "nearest", "bfloat16", True),
    ((1, 3, 1234, 1345), (2345, 2456), "nearest", "float16", False),
    ((4, 3, 2345, 2456), (1234, 1345), "nearest-exact", "float16", False),
    ((1, 3, 2345, 2456), (1234, 1345), "nearest-exact", "float32", False),
]
# Static forwards that one-round shards of the static matrix put behind stock at 858217c, each
# with kernels no longer than stock's (docs/runs/perf-h200-2026-12-02-one-h200.md, section D).
STATIC_CASES = [
    "interp nearest (8, 64, 200, 200)->(300, 300) float16 contiguous_format",
    "interp nearest (1, 3, 1234, 1345)->(2345, 2456) float16 channels_last size:literal",
    "interp nearest (4, 3, 1234, 1345)->(2345, 2456) float16 channels_last size:literal",
    "interp nearest-exact (16, 64, 16000)->(32000,) bfloat16 contiguous_format",
]
CALLS = 200  # per round


def interpolate(osize, mode: str, form: str):
    import torch.nn.functional as F

    if form == "literal":
        return eval(f"lambda x: F.interpolate(x, size={tuple(osize)!r}, mode={mode!r})", {"F": F})
    kwargs = dict(size=tuple(osize), mode=mode)
    return lambda x: F.interpolate(x, **kwargs)


def measure(row, form: str, device: str, rounds: int, calls: int, stock: bool) -> dict:
    import torch

    shape, osize, mode, dtype, channels_last = row
    x = torch.randn(shape, device=device).to(getattr(torch, dtype))
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    record = timed_call(interpolate(osize, mode, form), x, device, rounds, calls, stock, dynamic=True)
    return {"row": f"{mode} {shape}->{osize} {dtype} {'channels_last' if channels_last else 'contiguous'}",
            "form": form, **record}


def measure_static(names, device: str, rounds: int, calls: int, stock: bool):
    """One record per harness case of ``names`` (forwards of ``device``'s matrix), ``dynamic=False``."""
    from perf.bench import build_workload
    from perf.cases import make_cases

    cases = {case.name: case for case in make_cases(device)}
    missing = [name for name in names if name not in cases]
    if missing:
        raise SystemExit(f"call_host_probe: no case {missing} in the {device} matrix")
    for name in names:
        work = build_workload(cases[name])
        (x,) = work.args
        yield {"case": name, **timed_call(work.forward, x, device, rounds, calls, stock, dynamic=False)}


def timed_call(fn, x, device: str, rounds: int, calls: int, stock: bool, dynamic: bool) -> dict:
    """``fn(x)`` compiled with ``dynamic``, checked against eager, timed in rounds interleaved with
    an empty compiled call of the same ``dynamic``, and its Python calls per call."""
    import torch

    torch._dynamo.reset()
    compiled = torch.compile(fn, dynamic=dynamic)
    empty = torch.compile(lambda t: t + 1, dynamic=dynamic)
    small = torch.ones(8, device=device)
    expected, actual = fn(x), compiled(x)
    assert torch.equal(actual, expected), "compiled != eager"
    assert stock or actual.stride() == expected.stride(), "the package's strides != eager's"
    for _ in range(5):
        compiled(x), empty(small)
    call, empty_call = [], []
    for _ in range(rounds):
        empty_call.append(back_to_back_us(lambda: empty(small), calls, device))
        call.append(back_to_back_us(lambda: compiled(x), calls, device))
    return {"dynamic": dynamic, "call_us": statistics.median(call), "call_us_min": min(call),
            "empty_us": statistics.median(empty_call), "empty_us_min": min(empty_call),
            "python_calls": profiled(lambda: compiled(x), 100, device=device).total_calls / 100}


def main(argv=None) -> int:
    def add_arguments(parser):
        parser.add_argument("--rounds", type=int, default=7)
        parser.add_argument("--calls", type=int, default=CALLS)
        parser.add_argument("--static", action="store_true",
                            help="STATIC_CASES compiled with dynamic=False, instead of ROWS with dynamic=True")

    def records(args):
        if args.static:
            yield from measure_static(STATIC_CASES, args.device, args.rounds, args.calls, args.stock)
            return
        for row in ROWS:
            for form in ("literal", "symbolic"):
                yield measure(row, form, args.device, args.rounds, args.calls, args.stock)

    return tag_probe_main("call_host_probe", argv, add_arguments, records)


if __name__ == "__main__":
    raise SystemExit(main())
