"""Fixtures of the walk tests (the corpus is ``walk_corpus``, ``tests/conftest.py``)."""

import pytest

from tests.factories import MembershipFactory


@pytest.fixture
def asker(walk_corpus):
    """A member of the walk corpus's tenant, who starts and steers walks."""
    return MembershipFactory(tenant=walk_corpus).user
