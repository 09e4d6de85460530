from __future__ import annotations

import pytest

from spoteval.store import Store, StoreError
from tests.conftest import StoreTarget


def test_put_new_creates_once_and_never_overwrites(any_target: StoreTarget) -> None:
    store = Store(any_target.url, any_target.options)
    assert store.put_new("runs/r1/results/e1.json", b'{"a": 1}') is True
    second = store.put_new("runs/r1/results/e1.json", b'{"a": 2}')
    assert second is False
    assert store.get("runs/r1/results/e1.json") == b'{"a": 1}'


def test_get_missing_object_is_none(any_target: StoreTarget) -> None:
    store = Store(any_target.url, any_target.options)
    assert store.get("runs/r1/results/missing.json") is None
    assert store.exists("runs/r1/results/missing.json") is False


def test_list_returns_keys_under_prefix_sorted(any_target: StoreTarget) -> None:
    store = Store(any_target.url, any_target.options)
    for key in (
        "runs/r1/events/b.json",
        "runs/r1/events/a.json",
        "runs/r1/results/x.json",
        "runs/r2/events/c.json",
    ):
        assert store.put_new(key, b"{}")
    assert store.list("runs/r1/events/") == ["runs/r1/events/a.json", "runs/r1/events/b.json"]
    assert store.list("runs/r9/") == []
    assert store.exists("runs/r1/results/x.json")


def test_keys_are_relative_to_the_url_prefix(s3_target: StoreTarget) -> None:
    store = Store(s3_target.url, s3_target.options)
    store.put_new("k.json", b"1")
    bucket = s3_target.url.split("/")[2]
    root = Store(f"s3://{bucket}", s3_target.options)
    assert root.get("evals/k.json") == b"1"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("bucket/prefix", "must look like"),
        ("ftp://host/x", "unknown scheme 'ftp'"),
        ("s3:///prefix", "names no bucket"),
        ("file://relative/path", "absolute path"),
    ],
)
def test_bad_urls_are_refused_with_the_url_named(url: str, message: str) -> None:
    with pytest.raises(StoreError, match=message):
        Store(url)


def test_unreachable_store_raises_store_error_naming_the_key() -> None:
    store = Store(
        "s3://bucket/p",
        {
            "endpoint": "http://127.0.0.1:9",
            "region": "us-east-1",
            "access_key_id": "x",
            "secret_access_key": "y",
            "allow_http": True,
            "max_retries": 0,
            "retry_timeout": 1,
        },
    )
    with pytest.raises(StoreError, match=r"runs/r1/results/e1\.json"):
        store.get("runs/r1/results/e1.json")
