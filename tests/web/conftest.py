"""The web tests' shared TestClient: one app with the served limits per test module."""

import pytest
from fastapi.testclient import TestClient

from tenfold.web import create_app


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app())
