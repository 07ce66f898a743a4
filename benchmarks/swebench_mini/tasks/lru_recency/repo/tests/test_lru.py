import pytest

from tinycache import LRUCache


def test_put_and_get():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.get("a") == 1


def test_capacity_holds():
    cache = LRUCache(2)
    for key in "abc":
        cache.put(key, key)
    assert len(cache) == 2 and "a" not in cache


def test_missing_default():
    assert LRUCache(1).get("x", 0) == 0


def test_bad_capacity():
    with pytest.raises(ValueError):
        LRUCache(0)
