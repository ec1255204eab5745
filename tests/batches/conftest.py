"""Fixtures of the batch tests: the fake provider server, SDK clients pointed at it, a store of
each kind."""

from __future__ import annotations

import anthropic
import openai
import pytest
import storekit
from batchfake import FakeProvider


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


@pytest.fixture
def openai_client(fake):
    return openai.OpenAI(base_url=fake.openai_url, api_key="test", max_retries=0)


@pytest.fixture
def anthropic_client(fake):
    return anthropic.Anthropic(base_url=fake.anthropic_url, api_key="test", max_retries=0)


@pytest.fixture(params=sorted(storekit.STORES))
def store(request, tmp_path):
    made = storekit.STORES[request.param](tmp_path)
    yield made
    close = getattr(made, "close", None)
    if close is not None:
        close()
