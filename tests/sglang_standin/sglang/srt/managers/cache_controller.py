# SPDX-License-Identifier: Apache-2.0
"""The stand-in of the storage side of SGLang's HiCacheController: how it
calls a storage backend.  Keys in batches of STORAGE_BATCH_SIZE pages;
batch_exists gives a prefix length per batch, and the query stops at the
first short batch; with "interface_v1" in the extra config the zero-copy
calls get the batch's token slots (one int64 a token), else the generic
calls get flat pages; a get or a set counts the leading True results and
stops at the first batch that is not whole; MLA backups run on TP rank 0
alone."""
from sglang.srt.mem_cache.hicache_storage import STORAGE_BATCH_SIZE, HiCacheStorageExtraInfo
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory


class HiCacheController:
    def __init__(self, storage_config, mem_pool_host, backend="dynamic"):
        self.storage_config, self.mem_pool_host = storage_config, mem_pool_host
        self.page_size = mem_pool_host.page_size
        self.storage_backend = StorageBackendFactory.create_backend(backend, storage_config, mem_pool_host)
        self.storage_backend.register_mem_pool_host(mem_pool_host)
        self.zero_copy = bool((storage_config.extra_config or {}).get("interface_v1", 0))
        self.backup_skip = storage_config.is_mla_model and storage_config.tp_rank != 0

    def storage_hit_query(self, hashes):
        """How many of the pages hashes names the backend has (a prefix)."""
        hit, prefix_keys = 0, []
        for i in range(0, len(hashes), STORAGE_BATCH_SIZE):
            batch = hashes[i:i + STORAGE_BATCH_SIZE]
            n = self.storage_backend.batch_exists(batch, HiCacheStorageExtraInfo(prefix_keys=list(prefix_keys)))
            hit += n
            if n < len(batch):
                break
            prefix_keys += batch
        return hit

    def _batches(self, hashes, host_indices):
        P = self.page_size
        for i in range(0, len(hashes), STORAGE_BATCH_SIZE):
            batch = hashes[i:i + STORAGE_BATCH_SIZE]
            yield batch, host_indices[i * P:(i + len(batch)) * P], HiCacheStorageExtraInfo(prefix_keys=hashes[:i])

    def page_get(self, hashes, host_indices):
        """Pages fetched into their host slots: the count of the prefix."""
        done = 0
        for batch, idx, info in self._batches(hashes, host_indices):
            if self.zero_copy:
                res = self.storage_backend.batch_get_v1(batch, idx, info)
            else:
                res = self._generic_get(batch, idx)
            n = 0
            while n < len(res) and res[n]:
                n += 1
            done += n
            if n < len(batch):
                break
        return done

    def _generic_get(self, batch, idx):
        hp = self.mem_pool_host
        dummies = [hp.get_dummy_flat_data_page() for _ in batch]
        pages = self.storage_backend.batch_get(batch, dummies)
        res = []
        for j, pg in enumerate(pages):
            if pg is None:
                break
            hp.set_from_flat_data_page(int(idx[j * self.page_size]), pg)
            res.append(True)
        return res + [False] * (len(batch) - len(res))

    def page_set(self, hashes, host_indices):
        """Pages backed up from their host slots: the count of the prefix."""
        if self.backup_skip:
            return len(hashes)
        done = 0
        for batch, idx, info in self._batches(hashes, host_indices):
            if self.zero_copy:
                ok = all(self.storage_backend.batch_set_v1(batch, idx, HiCacheStorageExtraInfo(
                    prefix_keys=info.prefix_keys)))
            else:
                hp = self.mem_pool_host
                ok = self.storage_backend.batch_set(
                    batch, [hp.get_data_page(int(idx[j * self.page_size])) for j in range(len(batch))])
            if not ok:
                break
            done += len(batch)
        return done
