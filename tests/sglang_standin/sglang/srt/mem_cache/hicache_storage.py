# SPDX-License-Identifier: Apache-2.0
"""The stand-in of sglang.srt.mem_cache.hicache_storage: the storage
config and extra info SGLang hands a backend (its fields in SGLang's
order), the abstract class a backend subclasses (the v1 calls raise until
a backend implements them, as SGLang's do), and SGLang's page key rule
and namespace seed."""
import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import List, Optional

STORAGE_BATCH_SIZE = 128  # pages per batched storage call


def get_hash_str(token_ids, prior_hash=None):
    """SGLang's key of a page: SHA-256 over the previous page's key (its
    raw bytes) and each token id as 4 little-endian bytes, as hex."""
    h = hashlib.sha256()
    if prior_hash:
        h.update(bytes.fromhex(prior_hash))
    for t in token_ids:
        h.update(int(t).to_bytes(4, byteorder="little", signed=False))
    return h.hexdigest()


def storage_namespace_seed(extra_key=None, cache_salt=None):
    """The hex seed a request's chain starts from when it has a LoRA id
    (extra_key) or a tenant salt; None when it has neither."""
    if extra_key is None and cache_salt is None:
        return None
    h = hashlib.sha256(b"sglang-cache-namespace-v1")
    for part in (extra_key, cache_salt):
        if part is None:
            h.update(b"\x00")
        else:
            b = str(part).encode()
            h.update(b"\x01" + len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


@dataclass
class HiCacheStorageConfig:
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclass
class HiCacheStorageExtraInfo:
    prefix_keys: Optional[List[str]] = None
    extra_info: Optional[dict] = None


class HiCacheStorage(ABC):
    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        raise NotImplementedError()

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        raise NotImplementedError()

    @abstractmethod
    def get(self, key, target_location=None, target_sizes=None):
        pass

    @abstractmethod
    def batch_get(self, keys, target_locations=None, target_sizes=None):
        pass

    @abstractmethod
    def set(self, key, value=None, target_location=None, target_sizes=None):
        pass

    @abstractmethod
    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        pass

    @abstractmethod
    def exists(self, key):
        pass

    def batch_exists(self, keys, extra_info=None):
        for i, k in enumerate(keys):
            if not self.exists(k):
                return i
        return len(keys)

    def clear(self):
        pass

    def get_stats(self):
        return None
