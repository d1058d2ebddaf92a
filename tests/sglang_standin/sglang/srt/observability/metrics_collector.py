# SPDX-License-Identifier: Apache-2.0
"""The stand-in of SGLang's storage metrics: what a backend's get_stats()
must return, and the collector's check of it."""
from dataclasses import dataclass, field
from typing import List


@dataclass
class StorageMetrics:
    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)


def log_storage_metrics(storage_metrics):
    """What SGLang's collector does with get_stats(): None is nothing to
    log; anything else must be a StorageMetrics of four lists.  Returns
    (pages prefetched, pages backed up)."""
    if storage_metrics is None:
        return 0, 0
    assert isinstance(storage_metrics, StorageMetrics)
    for v in storage_metrics.prefetch_bandwidth + storage_metrics.backup_bandwidth:
        assert isinstance(v, float)
    return sum(storage_metrics.prefetch_pgs), sum(storage_metrics.backup_pgs)
