/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernel.cu - the gather/scatter kernel of the CUDA kernel path
 * (cuda.c): one launch per layer, a block per item of index.h (a
 * page's tokens of one head group, K or V, or one state piece), its
 * threads copying words of L.align bytes between the mapped envelopes and
 * the device pools.  The envelope side of an item is contiguous, so a
 * warp's loads are; the device side is one slot per token.
 *
 * The index arithmetic is index.h's, which the host implementation and
 * the CPU tests run too; this file adds only the loop and the launch.
 * Slots were checked against the pools when the transfer was made.
 */
#include <stdint.h>

#include <cuda_runtime.h>

extern "C" {
#include "internal.h" /* checks hc__gather_launch's prototype */
}

template <typename W>
__global__ void __launch_bounds__(256)
	hc_gather(const __grid_constant__ struct hc__dl L, uint8_t *env, const uint32_t *pages,
		  const uint32_t *presence, const uint64_t *slots, const uint64_t *state_slots, int store)
{
	/* 64 bits: item + gridDim.x must not wrap near 2^32 items */
	for (uint64_t item = blockIdx.x; item < L.items; item += gridDim.x) {
		struct hc__dl_seg s;

		if (!hc__dl_seg(&L, (uint32_t)item, pages, presence, &s))
			continue;
		const uint32_t per_tok = (uint32_t)(s.gb / sizeof(W));
		const uint32_t total = s.ntok * per_tok;
		for (uint32_t k = threadIdx.x; k < total; k += blockDim.x) {
			const uint32_t t = k / per_tok, w = k - t * per_tok;
			W *h = reinterpret_cast<W *>(env + s.env + (uint64_t)t * s.gb) + w;
			W *d = reinterpret_cast<W *>(s.dev +
						     hc__dl_off(&s, hc__dl_slot(&L, &s, t, slots, state_slots))) +
			       w;
			if (store)
				*h = *d;
			else
				*d = *h;
		}
	}
}

template <typename W>
static void launch(const struct hc__dl *L, unsigned grid, uint8_t *env, const uint32_t *pages, const uint32_t *presence,
		   const uint64_t *slots, const uint64_t *state_slots, int store, cudaStream_t st)
{
	hc_gather<W><<<grid, 256, 0, st>>>(*L, env, pages, presence, slots, state_slots, store);
}

extern "C" int hc__gather_launch(const struct hc__dl *L, uint8_t *env, const uint32_t *pages, const uint32_t *presence,
				 const uint64_t *slots, const uint64_t *state_slots, int store, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	/* Enough blocks to keep every SM's loads in flight; each loops over the rest. */
	unsigned grid = L->items < 16384u ? L->items : 16384u;

	if (L->items == 0)
		return (int)cudaSuccess;
	/* The launch's error is read with cudaGetLastError: clear an earlier
	 * one first (this is our worker thread), or it fails a good launch. */
	(void)cudaGetLastError();
	switch (L->align) {
	case 16:
		launch<uint4>(L, grid, env, pages, presence, slots, state_slots, store, st);
		break;
	case 8:
		launch<uint2>(L, grid, env, pages, presence, slots, state_slots, store, st);
		break;
	case 4:
		launch<uint32_t>(L, grid, env, pages, presence, slots, state_slots, store, st);
		break;
	case 2:
		launch<uint16_t>(L, grid, env, pages, presence, slots, state_slots, store, st);
		break;
	default:
		launch<uint8_t>(L, grid, env, pages, presence, slots, state_slots, store, st);
		break;
	}
	return (int)cudaGetLastError();
}
