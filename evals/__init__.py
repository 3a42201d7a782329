"""Evaluation datasets that ship with daimon (run by ``daimon eval``)."""
