/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spin.cu - bench-gpu's stand-in for one layer of a model's compute: a
 * kernel that spins on the GPU's global timer (%globaltimer, nanoseconds)
 * for a given time, and a launcher that C can call.  One warp, no memory
 * traffic: it takes an SM's slot for the time asked and leaves the copy
 * engines and the memory bus to the transfer it overlaps.
 */
#include <stdint.h>

#include <cuda_runtime.h>

static __device__ __forceinline__ uint64_t globaltimer_ns(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void bench_spin_kernel(uint64_t ns)
{
	const uint64_t t0 = globaltimer_ns();

	while (globaltimer_ns() - t0 < ns)
		;
}

/* One launch on stream (a cudaStream_t) that runs for ns nanoseconds;
 * returns the launch's cudaError_t.  bench-gpu.c declares it too. */
extern "C" int bench_spin(void *stream, uint64_t ns)
{
	bench_spin_kernel<<<1, 32, 0, (cudaStream_t)stream>>>(ns);
	return (int)cudaGetLastError();
}
