"""Command line: ``gpugeek-jupyter demo [NOTEBOOK]`` runs a tutorial notebook headless and reports it.

``gpugeek-jupyter pools`` lists every pool in the registry.

``gpugeek-jupyter doctor [--json]`` checks the installation (JupyterLab and server extensions, the
registry, GPUs, Kubernetes, torch), one line per check; exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

DEFAULT_NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01-quickstart.ipynb"


def _outputs_text(cell: dict) -> str:  # type: ignore[type-arg]
    texts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            texts.append(output.get("text", ""))
        elif output.get("output_type") in ("execute_result", "display_data"):
            data = output.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data:
                texts.append("[widget]")
            else:
                texts.append(data.get("text/plain", ""))
        elif output.get("output_type") == "error":
            texts.append(f"{output.get('ename')}: {output.get('evalue')}")
    return "".join(t if t.endswith("\n") else t + "\n" for t in texts if t)


def demo(notebook: Path, timeout: int) -> int:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(notebook, as_version=4)
    print(f"Running {notebook} in a fresh kernel...\n")
    started = time.perf_counter()
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(notebook.parent)}}
    )
    failed = False
    try:
        client.execute()
    except CellExecutionError as e:
        failed = True
        print(f"A cell failed:\n{e}", file=sys.stderr)
    for index, cell in enumerate(nb.cells, 1):
        if cell.cell_type != "code":
            continue
        print(f"--- cell {index} ---")
        print("\n".join("  " + line for line in cell.source.splitlines()))
        text = _outputs_text(cell).rstrip()
        if text:
            print("\n".join("  > " + line for line in text.splitlines()))
    print(f"\n{'FAILED' if failed else 'Done'} in {time.perf_counter() - started:.1f} s")
    return 1 if failed else 0


def run_doctor(as_json: bool = False) -> int:
    from . import doctor

    results = doctor.run_checks()
    print(doctor.as_json(results) if as_json else doctor.report(results))
    return 1 if doctor.any_failed(results) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpugeek-jupyter", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("demo", help="execute a tutorial notebook headless and print what it did")
    run.add_argument("notebook", nargs="?", type=Path, default=DEFAULT_NOTEBOOK)
    run.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    commands.add_parser("pools", help="list every pool in the registry")
    doctor = commands.add_parser(
        "doctor", help="check the installation, one line per check; exit status 1 when one fails"
    )
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    args = parser.parse_args(argv)
    if args.command == "doctor":
        return run_doctor(as_json=args.json)
    if args.command == "demo":
        if not args.notebook.exists():
            parser.error(f"notebook '{args.notebook}' does not exist (e.g. notebooks/01-quickstart.ipynb)")
        return demo(args.notebook, args.timeout)
    from . import list_pools

    for record in list_pools():
        print(
            f"{record.name:20} {record.status.value:9} {record.backend:10} {record.count} x {record.gpu_type}  {record.owner}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
