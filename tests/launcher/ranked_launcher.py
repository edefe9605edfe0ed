#!/usr/bin/env python3
"""A stand-in for torchrun / mpirun: starts --nproc copies of a command,
each with the variables torchrun gives its workers (RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK: PyTorch's torchrun documentation,
"Environment Variables"), inheriting everything else, as both launchers do.
Waits for all; exits 0, or with the first failing worker's status (a
signal N as 128+N).

    ranked_launcher.py --nproc N -- command [args...]
"""
import os
import subprocess
import sys


def main(argv):
    if len(argv) < 4 or argv[0] != "--nproc" or argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    n, cmd = int(argv[1]), argv[3:]
    procs = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n),
                   LOCAL_WORLD_SIZE=str(n), GROUP_RANK="0")
        procs.append(subprocess.Popen(cmd, env=env))
    status = 0
    for p in procs:
        rc = p.wait()
        if rc and not status:
            status = 128 - rc if rc < 0 else rc
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
