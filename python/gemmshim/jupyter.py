"""`gemmshim jupyter install`: a Jupyter kernel whose Python starts under
the shim, for notebooks that cannot call gemmshim.enable() early enough
(or should not have to). The kernel spec's argv is the launcher with the
options given, then this interpreter's ipykernel (Jupyter's kernel spec
format: jupyter-client's "Kernel specs" documentation)."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from .cli import launcher_path


def data_dir(prefix):
    """Where kernel specs go: PREFIX/share/jupyter, else $JUPYTER_DATA_DIR,
    else the user's data directory ($XDG_DATA_HOME/jupyter or
    ~/.local/share/jupyter on Linux, as jupyter_core has it)."""
    if prefix:
        return Path(prefix) / "share" / "jupyter"
    if os.environ.get("JUPYTER_DATA_DIR"):
        return Path(os.environ["JUPYTER_DATA_DIR"])
    xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(xdg) / "jupyter"


def main(argv):
    p = argparse.ArgumentParser(prog="gemmshim jupyter",
                                description="Install a Jupyter kernel that runs this Python under the shim.")
    sub = p.add_subparsers(dest="action", required=True)
    inst = sub.add_parser("install", help="write the kernel spec")
    inst.add_argument("--name", default="gemmshim", help="the kernel's folder name (default gemmshim)")
    inst.add_argument("--display-name", default=None, help="its name in Jupyter's menus")
    inst.add_argument("--prefix", default=None, help="install under PREFIX/share/jupyter (a venv's sys.prefix)")
    inst.add_argument("--launcher", default=None, help=argparse.SUPPRESS)
    args, options = inst.parse_known_args(argv[1:]) if argv[:1] == ["install"] else (p.parse_args(argv), [])
    exe = Path(args.launcher) if args.launcher else launcher_path()
    # The options are the launcher's own: it checks them, as before a run.
    check = subprocess.run([str(exe), "check", *options], capture_output=True, text=True)
    if check.returncode != 0:
        sys.stderr.write(check.stderr)
        return check.returncode
    folder = data_dir(args.prefix) / "kernels" / args.name
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [str(exe), *options, "--", sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": args.display_name or f"Python 3 (gemmshim{' ' + ' '.join(options) if options else ''})",
        "language": "python",
    }
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    print(f"gemmshim: kernel '{args.name}' installed in {folder}")
    return 0
