/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda.h - the CUDA runtime calls of cuda.c, through a table (as
 * SQLite's VFS routes its system calls): the library fills it with the
 * runtime's functions, and the tests on machines without a GPU replace
 * them with a fake runtime over host memory (tests/test_cudafake.c), so
 * everything cuda.c does but the kernel itself runs in 'make check'.
 * Replace it only while no CUDA device is open.
 */
#ifndef HC_LIB_DEV_CUDA_H
#define HC_LIB_DEV_CUDA_H

#include <cuda_runtime.h>

#include "internal.h"

struct hc__cuda_rt {
	cudaError_t (*GetDeviceCount)(int *n);
	cudaError_t (*SetDevice)(int dev);
	cudaError_t (*DeviceGetAttribute)(int *v, enum cudaDeviceAttr a, int dev);
	cudaError_t (*PointerGetAttributes)(struct cudaPointerAttributes *a, const void *p);
	cudaError_t (*HostRegister)(void *p, size_t n, unsigned flags);
	cudaError_t (*HostUnregister)(void *p);
	cudaError_t (*StreamCreateWithFlags)(cudaStream_t *s, unsigned flags);
	cudaError_t (*StreamDestroy)(cudaStream_t s);
	cudaError_t (*StreamSynchronize)(cudaStream_t s);
	cudaError_t (*StreamWaitEvent)(cudaStream_t s, cudaEvent_t e, unsigned flags);
	cudaError_t (*MallocAsync)(void **p, size_t n, cudaStream_t s);
	cudaError_t (*FreeAsync)(void *p, cudaStream_t s);
	cudaError_t (*MallocHost)(void **p, size_t n);
	cudaError_t (*FreeHost)(void *p);
	cudaError_t (*MemcpyAsync)(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s);
	cudaError_t (*EventCreateWithFlags)(cudaEvent_t *e, unsigned flags);
	cudaError_t (*EventRecord)(cudaEvent_t e, cudaStream_t s);
	cudaError_t (*EventSynchronize)(cudaEvent_t e);
	cudaError_t (*EventDestroy)(cudaEvent_t e);
	cudaError_t (*GetLastError)(void);
	/* kernel.cu's launch (hc__gather_launch) */
	int (*gather)(const struct hc__dl *L, uint8_t *env, const uint32_t *pages, const uint32_t *presence,
		      const uint64_t *slots, const uint64_t *state_slots, int store, void *stream);
};

extern struct hc__cuda_rt hc__cuda;

#endif /* HC_LIB_DEV_CUDA_H */
