"""How tests/data/old_states.pickle was written, with wdspipes at 8615cc5 (the main before the
stage model): ``PYTHONPATH=<a checkout of 8615cc5> python tests/data/make_old_states.py DIR OUT``
writes the shards of tests/old_state_pipelines.py in DIR, and, for each pipeline and cut, the
state saved there (pickled and read back, as a checkpoint keeps it), the items delivered after
it in the epoch, and those of the epoch after."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path


def main(directory: str, out: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from old_state_pipelines import PIPELINES, keys_of, write_shards

    os.chdir(directory)
    write_shards(".")
    cases = {}
    for name, (build, cuts) in PIPELINES.items():
        for cut in cuts:
            pipe = build()
            items = iter(pipe)
            head = [keys_of(next(items)) for _ in range(cut)]
            state = pickle.loads(pickle.dumps(pipe.state_dict()))
            rest = [keys_of(item) for item in items]
            after = [keys_of(item) for item in pipe]
            cases[f"{name}@{cut}"] = {"state": state, "head": head, "rest": rest, "next": after}
    with open(out, "wb") as written:
        pickle.dump(cases, written)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
