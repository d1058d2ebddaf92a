# SPDX-License-Identifier: Apache-2.0
"""The stand-in of SGLang's host KV pools: the attributes a storage backend
reads, and kv_buffer in the shape of each layout (SGLang's pool_host):
  MHA layer_first        [2, layers, size, heads, head_dim]
      page_first         [2, size, layers, heads, head_dim]
      page_first_direct  [2, pages, layers, page_size, heads, head_dim]
      page_head          [2, pages, heads, page_size, layers, head_dim]
  MLA layer_first        [layers, size, 1, kv_lora_rank + qk_rope_head_dim]
      page_first         [size, layers, 1, dim]
      page_first_direct  [pages, layers, page_size, 1, dim]
For the tests, put() and take() write and read tokens by slot whatever the
layout ([2, layers, n, heads, head_dim], MLA [layers, n, dim]), and
get_data_page() gives a page flat in the layout's order, as SGLang's does;
set_from_flat_data_page() puts one back, and get_dummy_flat_data_page() is
a flat page of zeros to fetch into."""
import torch


class HostKVCache:
    def __init__(self, layer_num, size, page_size, dtype, layout):
        assert size % page_size == 0
        self.layer_num, self.size, self.page_size, self.dtype, self.layout = layer_num, size, page_size, dtype, layout
        self.page_num = size // page_size
        self.kv_buffer = torch.zeros(self._dims(), dtype=dtype)

    def _bo(self, slots):
        slots = torch.as_tensor(slots, dtype=torch.int64)
        return slots, slots // self.page_size, slots % self.page_size

    def get_data_page(self, index, flat=True):
        page = self.kv_buffer[self._sel(index)]
        return page.flatten() if flat else page

    def _sel(self, index):
        """The slice of kv_buffer that holds the page whose first slot is index."""
        P = self.page_size
        lead = 0 if isinstance(self, MLATokenToKVPoolHost) else 1  # MHA pools lead with K/V
        if self.layout == "page_first_direct":
            return (slice(None),) * lead + (slice(index // P, index // P + 1),)
        if self.layout == "page_first":
            return (slice(None),) * lead + (slice(index, index + P),)
        return (slice(None),) * (lead + 1) + (slice(index, index + P),)

    def get_dummy_flat_data_page(self):
        return torch.zeros(self.kv_buffer[self._sel(0)].numel(), dtype=self.dtype)

    def set_from_flat_data_page(self, index, data_page):
        dst = self.kv_buffer[self._sel(index)]
        dst.copy_(data_page.reshape(dst.shape))


class MHATokenToKVPoolHost(HostKVCache):
    def __init__(self, layer_num, head_num, head_dim, size, page_size, dtype=torch.bfloat16, layout="layer_first"):
        self.head_num, self.head_dim = head_num, head_dim
        super().__init__(layer_num, size, page_size, dtype, layout)

    def _dims(self):
        L, N, P, H, D = self.layer_num, self.size, self.page_size, self.head_num, self.head_dim
        return {"layer_first": (2, L, N, H, D), "page_first": (2, N, L, H, D),
                "page_first_direct": (2, N // P, L, P, H, D), "page_head": (2, N // P, H, P, L, D)}[self.layout]

    def put(self, slots, data):
        s, b, o = self._bo(slots)
        kv = self.kv_buffer
        if self.layout == "layer_first":
            kv[:, :, s] = data
        elif self.layout == "page_first":
            kv[:, s] = data.permute(0, 2, 1, 3, 4)
        elif self.layout == "page_first_direct":
            kv[:, b, :, o] = data.permute(2, 0, 1, 3, 4)
        else:
            kv[:, b, :, o] = data.permute(2, 0, 3, 1, 4)

    def take(self, slots):
        s, b, o = self._bo(slots)
        kv = self.kv_buffer
        if self.layout == "layer_first":
            return kv[:, :, s]
        if self.layout == "page_first":
            return kv[:, s].permute(0, 2, 1, 3, 4)
        if self.layout == "page_first_direct":
            return kv[:, b, :, o].permute(1, 2, 0, 3, 4)
        return kv[:, b, :, o].permute(1, 3, 0, 2, 4)


class MLATokenToKVPoolHost(HostKVCache):
    def __init__(self, layer_num, kv_lora_rank, qk_rope_head_dim, size, page_size, dtype=torch.bfloat16,
                 layout="layer_first"):
        self.kv_lora_rank, self.qk_rope_head_dim = kv_lora_rank, qk_rope_head_dim
        self.kv_cache_dim = kv_lora_rank + qk_rope_head_dim
        super().__init__(layer_num, size, page_size, dtype, layout)

    def _dims(self):
        L, N, P, d = self.layer_num, self.size, self.page_size, self.kv_lora_rank + self.qk_rope_head_dim
        return {"layer_first": (L, N, 1, d), "page_first": (N, L, 1, d),
                "page_first_direct": (N // P, L, P, 1, d)}[self.layout]

    def put(self, slots, data):
        s, b, o = self._bo(slots)
        kv = self.kv_buffer
        if self.layout == "layer_first":
            kv[:, s, 0] = data
        elif self.layout == "page_first":
            kv[s, :, 0] = data.permute(1, 0, 2)
        else:
            kv[b, :, o, 0] = data.permute(1, 0, 2)

    def take(self, slots):
        s, b, o = self._bo(slots)
        kv = self.kv_buffer
        if self.layout == "layer_first":
            return kv[:, s, 0]
        if self.layout == "page_first":
            return kv[s, :, 0].permute(1, 0, 2)
        return kv[b, :, o, 0].permute(1, 0, 2)
