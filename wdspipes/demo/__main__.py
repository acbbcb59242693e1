"""``python -m wdspipes.demo [OPTIONS]``: the same as ``wdspipes demo [OPTIONS]``."""

import sys

from wdspipes.cli import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))
