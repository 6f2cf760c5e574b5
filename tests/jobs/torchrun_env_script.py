"""Prints what a torchrun rank sees: every torchrun variable, argv, __name__, cwd, __file__, sys.path[0]."""

import argparse
import json
import os
import sys

from gpugeek_jupyter.jobs.env import TORCHRUN_VARIABLES

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--lr", type=float)
parser.add_argument("--batch_size", type=int)
args = parser.parse_args()

seen = {
    "env": {name: os.environ.get(name) for name in TORCHRUN_VARIABLES},
    "argv": sys.argv,
    "name": __name__,
    "cwd": os.getcwd(),
    "file": __file__,
    "path0": sys.path[0],
    "lr": args.lr,
    "batch_size": args.batch_size,
}
with open(os.path.join(args.out, f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump(seen, f)
