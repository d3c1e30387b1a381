"""The API answers as its own OpenAPI says, for requests generated from that OpenAPI, and
no hostile input gets a 5xx.

schemathesis generates requests for every operation of ``/openapi.json`` (valid
and invalid parameters, odd instants and strings) and checks each answer: no 5xx,
a status code the operation documents, a body of the documented schema, a
documented content type. A first pass of the same tool against a running demo
found a 500 (an instant in year 0 in UTC) and 422 bodies unlike the documented
one; this keeps both fixed. The app runs in process on the stores of ``api_stores``.

Then every operation's requests again, one parameter (or the body) replaced by
what an attacker sends: oversized, deeply nested, non-ASCII, negative, huge
numbers, forged tokens. Any status but a 5xx will do. ``/v1/stream`` runs on a
real server there (its answer never ends; its status is what counts).

(schemathesis's own pytest loader, ``schemathesis.pytest.from_fixture``, reads a
pytest attribute that pytest 9 removed, so the test draws the cases itself.)
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving.deps import speed_consumer
from tests.unit.api_stores import KEY, CaughtUp, app_on_filled_stores, served

EXCLUDED = [
    # A `from` after `to` is schema-valid (an OpenAPI schema cannot compare two
    # parameters) yet answered 422, by design.
    schemathesis.checks.positive_data_acceptance,
    # Replays each request with a wrong key over schemathesis's own HTTP transport,
    # which cannot reach this in-process app; test_api's test_v1_needs_an_api_key
    # sends no key and a wrong one to a /v1 route.
    schemathesis.checks.ignored_auth,
]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = app_on_filled_stores(tmp_path)
    app.dependency_overrides[speed_consumer] = CaughtUp  # /readyz 200, not 503 (a 5xx)
    with TestClient(app) as test_client:
        yield test_client


def test_every_operation_answers_as_the_openapi_says(client: TestClient) -> None:
    schema = schemathesis.openapi.from_dict(client.get("/openapi.json").json())
    operations = [result.ok() for result in schema.get_all_operations()]
    # the seven /v1 views, /v1/views/{view}, /v1/status, /v1/versions and its corrections,
    # /v1/sql, /healthz, /readyz, /metrics; /v1/stream's answer never ends (below)
    operations = [operation for operation in operations if operation.path != "/v1/stream"]
    assert len(operations) == 15

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=30,
            derandomize=True,  # the same requests every run: a failure is a regression
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        def answers_as_documented(case: schemathesis.Case) -> None:
            request = case.as_transport_kwargs(base_url=str(client.base_url), headers=KEY)
            del request["cookies"]  # none; httpx deprecates passing them per request
            response = client.request(**request)
            case.validate_response(response, excluded_checks=EXCLUDED, headers=KEY)

        answers_as_documented()


def _token(document: Any) -> str:
    text = document if isinstance(document, str) else json.dumps(document)
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip
HOSTILE = st.one_of(
    st.text(st.characters(min_codepoint=0x80), min_size=1, max_size=40),  # non-ASCII
    st.integers(max_value=-1).map(str),  # negative
    st.integers(min_value=2**63).map(str),  # past any 64-bit number
    st.integers(1_000, 5_000).map(lambda n: "[" * n + "]" * n),  # nested
    st.integers(1_000, 3_000).map(lambda n: _token('{"v": 1, "speed": ' + "[" * n + "]" * n + "}")),
    st.integers(10_000, 40_000).map(lambda n: "x" * n),  # oversized
    JSON_VALUES.map(lambda value: _token({"v": 1, "speed": value, "input": value})),
    JSON_VALUES.map(lambda value: _token({"v": 1, "horizon": value, "batch_version": value})),
    st.sampled_from(
        [
            "",
            "\x00",
            "nan",
            "inf",
            "-0",
            "1e999",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59-01:00",
            "booth_stats.0:1," * 2000,
            "booth_stats.\u00b2:1",
        ]
    ),
)
"""What an attacker sends as a parameter."""

HOSTILE_BODIES = st.one_of(
    HOSTILE.map(lambda text: json.dumps({"query": text}).encode()),
    JSON_VALUES.map(lambda value: json.dumps({"query": value}).encode()),
    st.integers(1_000, 5_000).map(lambda n: ("[" * n + "]" * n).encode()),
    st.binary(max_size=100),
)


def _sendable_header(value: str) -> bool:
    """No client can send a header holding a line break or a NUL (the HTTP parser takes
    none)."""
    return not any(character in value for character in "\r\n\x00")


def _hostile_case(
    case: schemathesis.Case, data: st.DataObject, operation: Any
) -> tuple[str, str, bytes | None]:
    """Replace one of the case's parameters by a hostile value, or draw a hostile body or
    key: where, which, and the body or key (else None)."""
    names = [
        (parameter.location.value, parameter.name) for parameter in operation.iter_parameters()
    ]
    names += [("header", "X-API-Key"), ("query", "unknown")]  # sent to any route
    if operation.body:
        names.append(("body", "body"))
    where, name = data.draw(st.sampled_from(names))
    if where == "body":
        return where, name, data.draw(HOSTILE_BODIES)
    value = data.draw(HOSTILE.filter(_sendable_header) if where == "header" else HOSTILE)
    if where == "query":
        case.query = {**(case.query or {}), name: value}
    elif name == "X-API-Key":
        return where, name, value.encode()  # sent in place of the test's key
    elif where == "header":
        case.headers = {**(case.headers or {}), name: value}
    else:
        case.path_parameters = {**(case.path_parameters or {}), name: value}
    return where, name, None


def _send_kwargs(
    case: schemathesis.Case, base_url: str, body: bytes | None = None, key: bytes | None = None
) -> dict[str, Any]:
    """The request of ``case`` with the test's key (or ``key``) and ``body`` if given
    (headers as bytes: a client may send any)."""
    request = case.as_transport_kwargs(base_url=base_url, headers=KEY)
    del request["cookies"]
    if key is not None:
        request["headers"]["X-API-Key"] = key
    request["headers"] = [
        (name.encode(), value.encode() if isinstance(value, str) else value)
        for name, value in request["headers"].items()
    ]
    if body is not None:
        request.pop("json", None)
        request["content"] = body
        request["headers"].append((b"content-type", b"application/json"))
    return request


HOSTILE_SETTINGS = settings(
    max_examples=25, derandomize=True, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large],
)  # fmt: skip


def _hostile_requests(
    operation: Any, send: Callable[[schemathesis.Case, bytes | None, bytes | None], int]
) -> None:
    """Run ``operation``'s hostile requests through ``send`` (it answers the status)."""

    @given(case=operation.as_strategy(), data=st.data())
    @HOSTILE_SETTINGS
    def no_server_error(case: schemathesis.Case, data: st.DataObject) -> None:
        where, name, sent = _hostile_case(case, data, operation)
        body, key = (sent, None) if where == "body" else (None, sent)
        status = send(case, body, key)
        assert status < 500, (operation.path, where, name, status)

    no_server_error()


def test_no_hostile_input_to_any_operation_gets_a_5xx(client: TestClient, tmp_path: Path) -> None:
    schema = schemathesis.openapi.from_dict(client.get("/openapi.json").json())
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 16

    def in_process(case: schemathesis.Case, body: bytes | None, key: bytes | None) -> int:
        return client.request(**_send_kwargs(case, str(client.base_url), body, key)).status_code

    for operation in operations:
        if operation.path != "/v1/stream":
            _hostile_requests(operation, in_process)

    with served(app_on_filled_stores(tmp_path / "stream")) as base_url:

        def over_http(case: schemathesis.Case, body: bytes | None, key: bytes | None) -> int:
            with httpx.stream(**_send_kwargs(case, base_url, body, key), timeout=10) as response:
                return response.status_code  # a stream's status, then the connection closes

        [stream] = [operation for operation in operations if operation.path == "/v1/stream"]
        _hostile_requests(stream, over_http)
