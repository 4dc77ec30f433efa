"""Hashes of the code Inductor generates for each harness case, to tell whether two trees compile
the matrix to the same kernels.

A run of the whole CUDA matrix takes long on one H200 (the static one about 1600 s; docs/perf.md,
"Carrying a run to a later commit"). Where a later commit generates, case by case, the same
Python wrapper and kernels as the commit a run measured, the run's numbers hold for it: this
module checks that, in a few minutes of one GPU.

Usage::

    python -m perf.codegen OUT.jsonl [--device cuda] [--dynamic false] [--call-forms literal]
        [--mode both] [--backward] [--quick] [--filter REGEX] [--tag PR|Nightly] [--workers N]
        [--code-dir DIR] [--tree DIR]
    python -m perf.codegen --compare A.jsonl B.jsonl

The first form compiles each selected case once (``torch.compile(fullgraph=True)``, as the
harness's Compiled column does, with its training step for fwd+bwd rows) and writes a line per
case: its index in the selected matrix, its name, how many graphs it compiled and the SHA-256 of
their code, normalized by ``normalize``. ``--workers N`` splits the cases over N processes (every
N-th case). ``--tree DIR`` imports ``decomps`` and ``lowerings`` from DIR, another commit's
(``git archive COMMIT decomps lowerings | tar -x -C DIR``), in place of the checkout's.
``--compare`` prints how many cases two files share with equal code, lists the others, and exits
1 unless all are equal.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

from perf.interp_mode import PACKAGE, TAGS, assert_package_absent, parse_bool, parse_shard, positive_int, select_cases

# Lines that vary between two compiles of the same graph: comments (kernel paths, source-node
# maps), Triton's backend hash in a kernel's metadata, and temporary paths.
_COMMENT = re.compile(r"^\s*#")
_VARYING = re.compile(r"'backend_hash': '[0-9A-Fa-f]+'|/tmp/[^\s'\"]+")


def normalize(code: str) -> str:
    """``code`` without its comment lines, backend hashes and temporary paths."""
    lines = (line for line in code.splitlines() if not _COMMENT.match(line))
    return _VARYING.sub("", "\n".join(lines))


def case_codes(case, dynamic: bool) -> list[str]:
    """The normalized code of each graph one harness call of ``case`` compiles (forward, then
    backward for a training step)."""
    import torch
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_code

    from perf.bench import build_workload

    torch._dynamo.reset()
    work = build_workload(case)
    call = work.runner(torch.compile(work.forward, fullgraph=True, dynamic=dynamic))
    # A cache hit returns a graph's module without generating its code: nothing to hash.
    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        _, codes = run_and_get_code(call, *work.args)
    return [normalize(code) for code in codes]


def digest(codes: list[str]) -> str:
    return hashlib.sha256("\n\0\n".join(codes).encode()).hexdigest()


def _hash_cases(args, out: Path) -> None:
    _, cases = select_cases(argparse.Namespace(**{**vars(args), "shard": None}), args.device)
    index, count = args.shard or (1, 1)  # sliced here, so that each line keeps its index in the matrix
    with out.open("w") as f:
        for i, case in list(enumerate(cases))[index - 1::count]:
            codes = case_codes(case, args.dynamic)
            if args.code_dir:
                args.code_dir.mkdir(parents=True, exist_ok=True)
                (args.code_dir / f"{i}.py").write_text("\n\n# ---- next graph ----\n\n".join(codes))
            record = {"index": i, "name": case.name, "graphs": len(codes), "sha256": digest(codes)}
            f.write(json.dumps(record) + "\n")
            f.flush()


def _spawn_workers(args, argv: list[str]) -> int:
    """Run ``argv`` again in ``args.workers`` processes, one shard each, then merge their lines
    in case order."""
    parts = [args.out.with_name(f"{args.out.name}.{k}") for k in range(1, args.workers + 1)]
    workers = [
        subprocess.Popen([sys.executable, "-m", "perf.codegen", *argv, "--workers", "1",
                          "--shard", f"{k}/{args.workers}", "--part", str(part)])
        for k, part in enumerate(parts, start=1)
    ]
    failed = [w.args for w in workers if w.wait() != 0]
    records = [json.loads(line) for part in parts if part.exists() for line in part.read_text().splitlines()]
    args.out.write_text("".join(json.dumps(r) + "\n" for r in sorted(records, key=lambda r: r["index"])))
    for part in parts:
        part.unlink(missing_ok=True)
    if failed:
        print(f"{len(failed)} worker(s) failed: {failed}", file=sys.stderr)
    return 1 if failed else 0


def compare(a: Path, b: Path) -> tuple[list[str], list[str], list[str]]:
    """(names with equal code, names with different code, names in one file only)."""
    first, second = ({r["name"]: r for r in map(json.loads, p.read_text().splitlines())} for p in (a, b))
    shared = [name for name in first if name in second]
    equal = [n for n in shared if (first[n]["graphs"], first[n]["sha256"]) == (second[n]["graphs"], second[n]["sha256"])]
    different = [n for n in shared if n not in equal]
    alone = sorted(set(first) ^ set(second))
    return equal, different, alone


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m perf.codegen", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, nargs="?", help="JSON-lines file of the hashes")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"))
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--dynamic", type=parse_bool, nargs="?", const=True, default=True)
    parser.add_argument("--mode", default="both", choices=("nearest", "nearest-exact", "both"))
    parser.add_argument("--call-forms", default="both", choices=("literal", "symbolic", "both"))
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--filter", default=None)
    parser.add_argument("--tag", default="PR", choices=TAGS, help=f"PR imports {PACKAGE}; Nightly never does")
    parser.add_argument("--workers", type=positive_int, default=1)
    parser.add_argument("--code-dir", type=Path, default=None, help="also write each case's code here")
    parser.add_argument("--tree", type=Path, default=None, help="import the package from this tree (PR only)")
    parser.add_argument("--shard", type=parse_shard, default=None, help=argparse.SUPPRESS)  # a worker's
    parser.add_argument("--part", type=Path, default=None, help=argparse.SUPPRESS)  # a worker's file
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.compare:
        equal, different, alone = compare(*args.compare)
        print(f"{len(equal)} of {len(equal) + len(different)} shared cases generate equal code; "
              f"{len(alone)} in one file only")
        for name in different:
            print(f"different: {name}")
        for name in alone:
            print(f"one file only: {name}")
        return 0 if not different and not alone else 1
    if args.out is None:
        build_parser().error("OUT is required without --compare")
    if args.tree and args.tag != "PR":
        build_parser().error("--tree takes the PR tag")
    if args.workers > 1:
        return _spawn_workers(args, argv)
    if args.tag == "PR":
        if args.tree:
            sys.path.insert(0, str(args.tree.resolve()))  # ahead of the checkout that -m puts first
        package = __import__(PACKAGE)
        print(f"{PACKAGE} from {package.__file__}", file=sys.stderr)
        if args.tree and not Path(package.__file__).resolve().is_relative_to(args.tree.resolve()):
            raise SystemExit(f"ERROR: {PACKAGE} was imported from {package.__file__}, not from --tree {args.tree}")
    else:
        assert_package_absent()
    _hash_cases(args, args.part or args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
