"""SpendRecord: a sub-agent's spending, claimed by the first run started inside collect()."""

from __future__ import annotations

from daimon.cost import SpendRecord


def test_a_spend_record_goes_to_the_first_run_that_claims_it() -> None:
    assert SpendRecord.claim() is None
    record, token = SpendRecord.collect()
    try:
        assert SpendRecord.claim() is record
        assert SpendRecord.claim() is None  # nested runs do not overwrite their caller's totals
    finally:
        SpendRecord.done(token)
    assert SpendRecord.claim() is None
