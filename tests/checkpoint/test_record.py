"""The record format every checkpoint backend stores (``daimon.kit.checkpoint_records``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daimon.core import (
    CheckpointCorruptError,
    CheckpointState,
    DaimonError,
    InvalidIdError,
    SerializationError,
)
from daimon.kit import checkpoint_records as _base
from daimon.testing.checkpoint import sample_state

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@FAST
@given(custom=st.dictionaries(st.text(), json_values, max_size=5), run_id=st.text(min_size=1))
def test_states_round_trip_or_are_refused_with_a_typed_error(
    custom: dict[str, Any], run_id: str
) -> None:
    try:
        state = CheckpointState(run_id=run_id, custom=custom)
        data = _base.encode(state, 7, 1_700_000_000_000)
    except SerializationError:
        return  # lone surrogates and reviving markers are refused, never stored
    record = _base.decode(data, run_id=run_id, seq=7)
    assert record == _base.Record(7, 1_700_000_000_000, state)
    assert _base.encode(record.state, 7, 1_700_000_000_000) == data  # byte-identical


@FAST
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_decode(data: bytes) -> None:
    with pytest.raises(CheckpointCorruptError):
        _base.decode(data, run_id="r")


def test_the_checksum_covers_the_number_and_the_time() -> None:
    data = _base.encode(sample_state("r"), 12, 1_700_000_000_000)
    for old, new in [(b'"seq":12', b'"seq":13'), (b'"saved_at":1700', b'"saved_at":1800')]:
        with pytest.raises(CheckpointCorruptError, match="sha256"):
            _base.decode(data.replace(old, new), run_id="r")


def test_a_record_is_checked_against_where_it_is_stored() -> None:
    data = _base.encode(sample_state("r"), 3, 1)
    with pytest.raises(CheckpointCorruptError, match="holds checkpoint number 3"):
        _base.decode(data, run_id="r", seq=4)
    with pytest.raises(CheckpointCorruptError, match="belongs to run 'r'"):
        _base.decode(data, run_id="other")


def test_conflict_is_a_daimon_error_naming_both_numbers() -> None:
    error = _base.conflict("r", 4, 6)
    assert isinstance(error, DaimonError)
    assert "checkpoint 4" in str(error)
    assert "checkpoint 6" in str(error)


@pytest.mark.parametrize("run_id", ["", None, 3, "\ud800"])
def test_run_ids_must_be_non_empty_text(run_id: Any) -> None:
    with pytest.raises(InvalidIdError, match="invalid run id"):
        _base.check_run_id(run_id)
