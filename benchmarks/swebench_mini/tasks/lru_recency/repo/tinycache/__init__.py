from tinycache.lru import LRUCache

__all__ = ["LRUCache"]
