# SPDX-License-Identifier: Apache-2.0
"""SGLang's host KV pools as the device path sees them.

A host pool keeps one kv_buffer tensor in one of SGLang's layouts (L
layers, N slots, P tokens a page, tb bytes of this rank's heads of a
token; MLA keeps one latent a token and no V):

  layout             MHA kv_buffer         MLA kv_buffer        slot stride  blocks
  layer_first        [2, L, N, H, D]       [L, N, 1, d]         tb           none
  page_first         [2, N, L, H, D]       [N, L, 1, d]         L * tb       none
  page_first_direct  [2, N/P, L, P, H, D]  [N/P, L, P, 1, d]    tb           P slots, L * P * tb apart

which is hc_dev_open(3)'s table.  page_head puts a token's heads apart, so
no slot is one run of bytes: it is refused.  HostLayout checks a host pool
against the pool's component and describes it.
"""
import errno

import torch

import hicache

LAYOUTS = ("layer_first", "page_first", "page_first_direct")

DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int8: "int8",
               torch.uint8: "uint8"}
for _n, _h in (("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2")):
    if hasattr(torch, _n):
        DTYPE_NAMES[getattr(torch, _n)] = _h
_DTYPE_OF = {v: k for k, v in hicache.DTYPES.items()}
_KV, _REPLICATED = 1, 1  # hc_component_info's kind and sharding


def kv_component(info, name=None):
    """(index, info) of the pool's K/V component (the one named name)."""
    comps = info["components"]
    kv = [i for i, c in enumerate(comps) if c["kind"] == _KV and (name is None or c["name"] == name)]
    if not kv:
        raise hicache.Error(errno.EINVAL, f"hicache: pool '{info['name']}' has no K/V component"
                                          f"{'' if name is None else ' named ' + repr(name)} (it has "
                                          f"{', '.join(c['name'] for c in comps)})")
    return kv[0], comps[kv[0]]


class HostLayout:
    """A host pool checked against the pool's component ci: a mismatch is
    hicache.Error naming both sides.  tb: this rank's bytes of a token (an
    MLA latent whole); split: the latent is the pool's K and V halves."""

    def __init__(self, hp, info, ci, comp, tp_size, mla, model, check_model):
        self.ci, self.pool_name, self.P, self.L = ci, info["name"], info["page_tokens"], comp["layers"]
        self.layout = getattr(hp, "layout", "layer_first")
        self.mla = mla
        if self.layout not in LAYOUTS:
            raise hicache.Error(errno.EINVAL, f"hicache: host pool layout '{self.layout}' is not one hicache copies "
                                              f"(a token's heads are not one run of bytes in it): use "
                                              f"--hicache-mem-layout {' or '.join(LAYOUTS)}")
        kv = hp.kv_buffer
        if not isinstance(kv, torch.Tensor):
            raise hicache.Error(errno.EINVAL, f"hicache: the host pool's kv_buffer is a {type(kv).__name__}, not "
                                              f"one tensor")
        if not kv.is_contiguous():
            raise hicache.Error(errno.EINVAL, "hicache: the host pool's kv_buffer is not contiguous")
        name = comp["name"]
        if hp.page_size != self.P:
            raise self._mismatch("page size", f"{hp.page_size} tokens a page", f"{self.P}")
        if hp.layer_num != self.L:
            raise self._mismatch(f"layers of component '{name}'", hp.layer_num, self.L)
        pdt = _DTYPE_OF.get(comp["dtype"], str(comp["dtype"]))
        if DTYPE_NAMES.get(kv.dtype) != pdt:
            raise self._mismatch(f"dtype of component '{name}'", kv.dtype, pdt)
        if check_model and model and model != info["model_id"]:
            raise self._mismatch("model (pages of another model would be wrong here; give \"check_model\": false "
                                 "if the names differ only in spelling)", repr(model), repr(info["model_id"]))
        isz = kv.element_size()
        self.split = False
        if mla:
            if comp["sharding"] != _REPLICATED:
                raise self._mismatch(f"sharding of component '{name}'", "an MLA model (one latent for all ranks)",
                                     "a sharded component: create it replicated (--kv ...,replicated)")
            latent, pb = kv.shape[-1] * isz, comp["kv_heads"] * comp["head_bytes"]
            if pb != latent and 2 * pb != latent:
                raise self._mismatch(f"latent of component '{name}'", f"{latent} bytes a token",
                                     f"{comp['kv_heads']} head(s) of {comp['head_bytes']} bytes (give half the "
                                     f"latent: its K and V halves)")
            self.tb, self.split = latent, 2 * pb == latent
        else:
            if comp["sharding"] == _REPLICATED and tp_size > 1:
                raise self._mismatch(f"sharding of component '{name}'", f"an MHA model at TP {tp_size}",
                                     "a replicated component (an MLA pool?)")
            H = comp["kv_heads"]
            mine = H // tp_size if H >= tp_size else 1
            if hp.head_num != mine or hp.head_dim * isz != comp["head_bytes"]:
                raise self._mismatch(f"heads of component '{name}' at TP {tp_size}",
                                     f"{hp.head_num} KV heads a rank of {hp.head_dim} x {kv.dtype}",
                                     f"{H} KV heads of {comp['head_bytes']} bytes, {mine} a rank")
            self.tb = hp.head_num * hp.head_dim * isz
        # this rank's bytes of a page: K and V of every layer (an MLA latent once)
        self.page_bytes = self.tb * self.P * self.L * (1 if mla else 2)
        self.flat_shape = self._flat_shape(hp)

    def _mismatch(self, what, host, pool):
        return hicache.Error(errno.EINVAL, f"hicache: {what}: SGLang's host pool has {host}, pool "
                                           f"'{self.pool_name}' has {pool}: create the pool for this model and TP "
                                           f"(hicache-sglang(7), \"The pool\")")

    def _flat_shape(self, hp):
        """The shape of one page of this layout: what SGLang's flat pages
        (get_data_page, set_from_flat_data_page) are a view of."""
        P, L = self.P, self.L
        if self.mla:
            d = hp.kv_buffer.shape[-1]
            return {"layer_first": (L, P, 1, d), "page_first": (P, L, 1, d),
                    "page_first_direct": (1, L, P, 1, d)}[self.layout]
        H, D = hp.head_num, hp.head_dim
        return {"layer_first": (2, L, P, H, D), "page_first": (2, P, L, H, D),
                "page_first_direct": (2, 1, L, P, H, D)}[self.layout]

    def describe(self, kv):
        """kv (a kv_buffer of this layout, or a page of it) as hc_dev_open
        takes it: a DeviceComponent."""
        isz, P, L = kv.element_size(), self.P, self.L
        bases, stride, nslots, bstride, bslots = [], 0, 0, 0, 0
        for K in ([kv] if self.mla else [kv[0], kv[1]]):
            b = K.data_ptr()
            if self.layout == "layer_first":  # [L, N, ...]
                bases.append([b + l * K.stride(0) * isz for l in range(L)])
                stride, nslots = K.stride(1) * isz, K.shape[1]
            elif self.layout == "page_first":  # [N, L, ...]
                bases.append([b + l * K.stride(1) * isz for l in range(L)])
                stride, nslots = K.stride(0) * isz, K.shape[0]
            else:  # page_first_direct [N/P, L, P, ...]
                bases.append([b + l * K.stride(1) * isz for l in range(L)])
                stride, nslots, bstride, bslots = K.stride(2) * isz, K.shape[0] * P, K.stride(0) * isz, P
        tb = self.tb
        if self.mla:  # the latent whole as K, or its halves as K and V
            k, v = bases[0], None
            if self.split:
                tb //= 2
                v = [a + tb for a in k]
        else:
            k, v = bases
        return hicache.DeviceComponent(self.ci, k, v, token_bytes=tb, token_stride=stride, slots=nslots,
                                       block_stride=bstride, block_slots=bslots)
