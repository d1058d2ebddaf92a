# SPDX-License-Identifier: Apache-2.0
"""The stand-in of SGLang's storage backend factory, "dynamic" part only:
import the module the extra config names, check that the class is a
HiCacheStorage, build it with (storage_config, kwargs)."""
import importlib

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage


class StorageBackendFactory:
    @classmethod
    def create_backend(cls, backend_name, storage_config, mem_pool_host, **kwargs):
        if backend_name != "dynamic" or storage_config.extra_config is None:
            raise ValueError(f"Unknown storage backend '{backend_name}'")
        cfg = storage_config.extra_config
        for field in ("backend_name", "module_path", "class_name"):
            if field not in cfg:
                raise ValueError(f"Missing required field '{field}' in backend config for 'dynamic' backend")
        module = importlib.import_module(cfg["module_path"])
        klass = getattr(module, cfg["class_name"])
        if not issubclass(klass, HiCacheStorage):
            raise TypeError(f"Backend class {cfg['class_name']} must inherit from HiCacheStorage")
        return klass(storage_config, kwargs)
