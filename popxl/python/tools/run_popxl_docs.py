"""Run PopXL's own user-guide programs (graphcore/popart ``docs/popxl/files/*.py``) unmodified.

Usage: ``python run_popxl_docs.py PATH`` where PATH is a checkout of graphcore/popart or a
bare clone of it (read with ``git show HEAD:...``). Each program runs twice in a fresh
interpreter: as it is (most name ``ipu_model``), and with the device names ``ipu_model``
and ``ipu_hw`` replaced by ``cpu``. Prints one line per program and run: ok, FAIL (the last
line of its error) or skip (why it cannot run here). The programs are read, never copied
into this repository.
"""

import pathlib
import subprocess
import sys
import tempfile

FILES = "docs/popxl/files"

# Programs that need what this machine cannot give, and why.
SKIP = {
    "mnist.py": "downloads MNIST through torchvision",
    "mnist_rts.py": "downloads MNIST through torchvision",
    "mnist_utils.py": "a helper module of mnist.py, not a program",
    "leaky_relu_op.py": "builds a C++ custom op against PopART's headers",
    "run_leaky_relu.py": "loads the C++ custom op of leaky_relu_op.py",
    "distributed_simple_example.py": "launched by poprun across processes (popdist)",
    "distributed_rts_simple_example.py": "launched by poprun across processes (popdist)",
    "distributed_rts_simple_example_manual_remote_buffer.py": "launched by poprun across processes (popdist)",
    "distributed_rts_complex_example.py": "launched by poprun across processes (popdist)",
}


def read_programs(root: pathlib.Path) -> dict:
    """The programs' texts by file name, from a checkout or a bare clone."""
    if (root / FILES).is_dir():
        return {p.name: p.read_text() for p in sorted((root / FILES).glob("*.py"))}
    names = subprocess.run(
        ["git", "-C", str(root), "ls-tree", "--name-only", "HEAD", FILES + "/"],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    out = {}
    for name in names:
        if name.endswith(".py"):
            show = ["git", "-C", str(root), "show", f"HEAD:{name}"]
            out[pathlib.Path(name).name] = subprocess.run(show, check=True, capture_output=True, text=True).stdout
    return out


def run(text: str, workdir: pathlib.Path, name: str) -> str:
    path = workdir / name
    path.write_text(text)
    proc = subprocess.run([sys.executable, str(path)], cwd=workdir, capture_output=True, text=True, timeout=600)
    if proc.returncode == 0:
        return "ok"
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    return "FAIL: " + (lines[-1] if lines else f"exit code {proc.returncode}")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    programs = read_programs(pathlib.Path(sys.argv[1]))
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        for name, text in programs.items():
            if name in SKIP:
                print(f"{name:60} skip: {SKIP[name]}")
                continue
            # Helper modules the programs import sit beside them.
            for other, other_text in programs.items():
                (workdir / other).write_text(other_text)
            as_is = run(text, workdir, name)
            on_cpu = run(text.replace('"ipu_model"', '"cpu"').replace('"ipu_hw"', '"cpu"'), workdir, name)
            failures += as_is != "ok"
            print(f"{name:60} as written: {as_is:10} on cpu: {on_cpu}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
