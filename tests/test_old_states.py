"""States saved by the main before the stage model (8615cc5, where each stage kept its own
position and seeds) load after it and go on exactly: the rest of the epoch and the epoch after
it are what that version delivered (tests/data/old_states.pickle, written by it on the
pipelines of tests/old_state_pipelines.py)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from old_state_pipelines import PIPELINES, keys_of, write_shards

from wdspipes.errors import ResumeError

SAVED = Path(__file__).parent / "data" / "old_states.pickle"


def old_cases() -> dict[str, Any]:
    with SAVED.open("rb") as saved:
        cases: dict[str, Any] = pickle.load(saved)  # the project's own test data
    return cases


@pytest.fixture
def in_shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_shards(".")


@pytest.mark.parametrize("case", sorted(old_cases()))
def test_a_state_saved_before_the_stage_model_goes_on_exactly(case: str, in_shards: None) -> None:
    saved = old_cases()[case]
    pipe = PIPELINES[case.partition("@")[0]][0]()
    pipe.load_state_dict(saved["state"])
    assert [keys_of(item) for item in pipe] == saved["rest"]
    assert [keys_of(item) for item in pipe] == saved["next"]


def test_every_pipeline_has_saved_states() -> None:
    assert {case.partition("@")[0] for case in old_cases()} == set(PIPELINES)


def test_a_state_of_a_format_no_longer_loaded_says_what_wrote_it(in_shards: None) -> None:
    state = dict(old_cases()["shuffled@11"]["state"], format="wdspipes-state/1")
    with pytest.raises(ResumeError, match=r"written by wdspipes 0\.1\.0\.dev0 .* start the epoch"):
        PIPELINES["shuffled"][0]().load_state_dict(state)
