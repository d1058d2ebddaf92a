/* SPDX-License-Identifier: Apache-2.0 */
/*
 * device.h - copies between the pool's envelopes and a rank's device KV,
 * layer by layer (doc/design.md, "The device path").
 *
 * A rank describes its device KV once (hc_dev_open): for each component it
 * copies, the K and V base address of every layer (a state component: one
 * base per layer), the bytes of this rank's heads of one token (of one
 * page, for a state), the stride from one slot to the next, and how many
 * slots there are, and whether slots sit in blocks with other data between
 * them.  This is the token-major layout of SGLang's [slots, heads,
 * head_dim] pools (layer_first, page_first with its layers interleaved,
 * page_first_direct in blocks of a page) and of vLLM's blocks.  Each transfer then
 * names pages and, per page, the slot of each token (a state: of the page).
 *
 * A transfer runs in the background, in layer order, and marks each layer
 * when its bytes have arrived, so a model can compute layer l as soon as
 * layer l is in.  A load copies READY pages (the caller holds them, e.g.
 * pinned by hc_lookup(HC_LOOKUP_PIN)) to the device; a store copies the
 * device to pages this process reserved, or a rank of its engine did (a
 * reservation ticket's: a page already READY is skipped), and with
 * HC_XFER_COMMIT commits this rank's shards of each page when every layer
 * is in (the replicated part is rank 0's to write).  The page handles and slot maps are copied:
 * the caller's arrays are free again when the call returns; the pages are
 * not, until the transfer is done.
 *
 * HC_DEV_HOST runs the same layout against host memory (the "device"
 * addresses are host pointers): the tests, and the service and the replay
 * on machines without a GPU, use it.
 *
 * HC_DEV_CUDA (a build with CUDA, hicache(7)) copies on a stream of its
 * own and records one CUDA event per layer: hc_xfer_layer_event gives it,
 * so a compute stream can wait for layer l with cudaStreamWaitEvent and
 * the host never blocks.  Each device has two threads of its own: one
 * issues the copies, one waits for each layer and marks it; no call here
 * makes a CUDA call on the caller's thread (its current device, context
 * and last error are left alone).  The first CUDA device opened on a pool registers
 * the pool's envelopes with cudaHostRegister (in chunks, from several
 * threads); hc_pool_detach unregisters them, so close every device first.
 * Two paths move the bytes (enum hc_dev_path): one cudaMemcpyAsync per
 * contiguous run, or one gather/scatter kernel launch per layer that reads
 * and writes the mapped envelopes itself.
 */
#ifndef HICACHE_DEVICE_H
#define HICACHE_DEVICE_H

#include <hicache/hicache.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hc_dev hc_dev;
typedef struct hc_xfer hc_xfer;

enum hc_dev_kind {
	HC_DEV_HOST = 0, /* host memory stands in for the device */
	HC_DEV_CUDA = 1, /* a CUDA device (configure --with-cuda) */
};

/* One component of the rank's device KV. */
struct hc_dev_comp {
	uint32_t size;         /* sizeof(struct hc_dev_comp); the same in every element */
	unsigned comp;         /* the pool's component index */
	const uint64_t *k;     /* [layers] address of slot 0 of K in each layer (a state: of the state) */
	const uint64_t *v;     /* [layers] of V; NULL for a state component, or for a replicated
				* one with no V (MLA's latent): its K half alone moves */
	uint64_t token_bytes;  /* this rank's bytes of one token (a state: of one page) */
	uint64_t token_stride; /* bytes from one slot to the next, >= token_bytes */
	uint64_t slots;        /* slots in each layer's pool */
	/* Blocks (appended: zero for a caller built before them): slots that
	 * sit in blocks of block_slots, block_stride bytes apart (SGLang's
	 * page_first_direct, vLLM's blocks with other layers between them):
	 * slot s at base + (s / block_slots) * block_stride
	 *               + (s % block_slots) * token_stride.
	 * block_slots 0: no blocks, slot s at base + s * token_stride. */
	uint64_t block_stride;
	uint32_t block_slots;
};

enum hc_dev_path {
	HC_PATH_AUTO = 0,   /* direct when a layer's runs average 64 KiB or more, else kernel
			     * (CUDA: always direct where the kernel path cannot run) */
	HC_PATH_DIRECT = 1, /* one copy per contiguous run, merged where adjacent on both sides */
	HC_PATH_KERNEL = 2, /* one gather/scatter per layer, item by item (lib/device/index.h) */
};

struct hc_dev_spec {
	uint32_t size; /* sizeof(struct hc_dev_spec) */
	enum hc_dev_kind kind;
	int device;       /* HC_DEV_CUDA: the device ordinal */
	uint32_t tp_size; /* the engine's TP size, and this rank */
	uint32_t tp_rank;
	const struct hc_dev_comp *comps;
	unsigned ncomp;
	enum hc_dev_path path;
	unsigned reg_threads; /* HC_DEV_CUDA: threads registering the pool; 0: 8 */
	uint64_t reg_chunk;   /* HC_DEV_CUDA: bytes per cudaHostRegister; 0: 1 GiB (a multiple of 2 MiB) */
};

HC_API int hc_dev_open(hc_pool *pool, const struct hc_dev_spec *spec, hc_dev **out);
HC_API int hc_dev_close(hc_dev *dev); /* waits for its transfers */

#define HC_XFER_COMMIT 0x1u /* store: commit this rank's shards when every layer is in */
#define HC_XFER_SYNC                                                                                                   \
	0x2u /* HC_DEV_HOST: copy on the calling thread, after the transfers made                                      \
	      * before; the call returns once the transfer is finished */

struct hc_xfer_req {
	uint32_t size; /* sizeof(struct hc_xfer_req) */
	const hc_page_t *pages;
	unsigned n;
	const uint64_t *slots;       /* [n * page_tokens]: the slot of token t of page i at i * T + t */
	const uint64_t *state_slots; /* [n]: the state slot of page i; NULL without state components */
	unsigned flags;              /* HC_XFER_* */
	void *after;                 /* HC_DEV_CUDA: a cudaEvent_t the copies wait for (a store: the forward
				      * pass that wrote the KV), as cudaStreamWaitEvent when the transfer
				      * starts issuing: record it before the call, and do not record it
				      * again until the transfer's first layer is issued; NULL: none */
};

HC_API int hc_dev_load(hc_dev *dev, const struct hc_xfer_req *req, hc_xfer **out);
HC_API int hc_dev_store(hc_dev *dev, const struct hc_xfer_req *req, hc_xfer **out);

HC_API unsigned hc_xfer_layers(const hc_xfer *x);          /* exception: layers it marks, the most of any
							    * component (0 for NULL) */
HC_API int hc_xfer_layer_done(hc_xfer *x, unsigned layer); /* 1 arrived, 0 not yet, or -errno */
HC_API int hc_xfer_wait_layer(hc_xfer *x, unsigned layer); /* 0 once layer is in, or the failure */
HC_API int hc_xfer_wait(hc_xfer *x);                       /* every layer (and the commits) */
HC_API int hc_xfer_free(hc_xfer *x);                       /* waits, then frees; returns its result */
/* Exception: HC_DEV_CUDA: the cudaEvent_t recorded after layer's copies (waits until
 * they are issued, not done); NULL with hc_last_error for HC_DEV_HOST or a
 * transfer that failed before that layer.  It is the transfer's: valid
 * until hc_xfer_free. */
HC_API void *hc_xfer_layer_event(hc_xfer *x, unsigned layer);

/* This process's figures for one device (counted since hc_dev_open). */
struct hc_dev_stats {
	uint64_t reg_ns;    /* wall time registering the pool with CUDA (the registration this
			     * device uses; 0 for HC_DEV_HOST) */
	uint64_t reg_bytes; /* bytes registered, in reg_chunks chunks by reg_threads threads */
	uint32_t reg_chunks, reg_threads;
	uint64_t loads, stores; /* transfers made */
	uint64_t load_bytes, store_bytes;
	uint64_t direct_layers; /* layers moved by the direct path, in copies copies */
	uint64_t copies;
	uint64_t kernel_layers; /* layers moved by the kernel path (one launch each) */
};
HC_API int hc_dev_stats(hc_dev *dev, struct hc_dev_stats *out, size_t size); /* size: sizeof *out */

#ifdef __cplusplus
}
#endif
#endif /* HICACHE_DEVICE_H */
