/* mlx5_ib's clock pages through rdma-core's libibverbs + libmlx5 (run under
 * `ferroverbs run`): `ibv_query_rt_values_ex` reads the device clock from the core
 * clock page (libmlx5's `mlx5_read_clock`, loads trapped by the layer), which runs
 * at `hca_core_clock` kHz against CLOCK_MONOTONIC; `mlx5dv_get_clock_info` copies
 * the clock info page, and `mlx5dv_ts_to_ns` of the device clock read now is
 * CLOCK_REALTIME now; `max_clock_info_update_nsec` is the page's rewrite period;
 * the pages' mmap refuses what mlx5_ib refuses (a writable core clock page: EPERM;
 * a clock info page of two pages: EINVAL; of an index other than V1: EOPNOTSUPP).
 * Prints "PASS name" / "FAIL name ..." and exits 1 on failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

#include "checker.h"

static long long now_ns(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int raw_clock(struct ibv_context *ctx, unsigned long long *ticks)
{
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	int r = ibv_query_rt_values_ex(ctx, &v);
	if (r)
		return r;
	if (!(v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK))
		return -1;
	*ticks = (unsigned long long)v.raw_clock.tv_nsec;
	return 0;
}

static int mmap_errno(struct ibv_context *ctx, size_t len, int prot, off_t pgoff)
{
	void *p = mmap(NULL, len, prot, MAP_SHARED, ctx->cmd_fd, pgoff * 4096);
	if (p != MAP_FAILED) {
		munmap(p, len);
		return 0;
	}
	return errno;
}

int main(void)
{
	char d[160];
	struct ibv_device **list;
	struct ibv_context *ctx = open_first_device(&list);
	struct ibv_device_attr_ex ax;
	int r = ibv_query_device_ex(ctx, NULL, &ax);
	snprintf(d, sizeof d, "r %d hca_core_clock %llu", r,
		 r ? 0ULL : (unsigned long long)ax.hca_core_clock);
	check("hca_core_clock", r == 0 && ax.hca_core_clock == 156250, d);
	double khz = r ? 156250.0 : (double)ax.hca_core_clock;

	/* The device clock moves at its rate. */
	unsigned long long t0 = 0, t1 = 0, t2 = 0;
	long long m0 = now_ns(CLOCK_MONOTONIC);
	int r0 = raw_clock(ctx, &t0);
	usleep(50000);
	int r1 = raw_clock(ctx, &t1);
	long long m1 = now_ns(CLOCK_MONOTONIC);
	int r2 = raw_clock(ctx, &t2);
	snprintf(d, sizeof d, "r %d %d %d ticks %llu %llu %llu", r0, r1, r2, t0, t1, t2);
	check("query_rt_values_ex", !r0 && !r1 && !r2 && t0 < t1 && t1 <= t2, d);
	double want = (double)(m1 - m0) * khz / 1e6;
	double got = (double)(t1 - t0);
	snprintf(d, sizeof d, "%.0f ticks in %lld ns, %.0f expected", got, m1 - m0, want);
	/* The window holds two clock reads besides the sleep. */
	check("device_clock_rate", got <= want * 1.001 && got >= want * 0.9, d);

	/* The clock info page turns ticks into CLOCK_REALTIME nanoseconds. */
	struct mlx5dv_clock_info ci;
	r = mlx5dv_get_clock_info(ctx, &ci);
	snprintf(d, sizeof d, "r %d mult %u shift %u mask %#llx", r, r ? 0 : ci.mult,
		 r ? 0 : ci.shift, r ? 0ULL : (unsigned long long)ci.mask);
	check("get_clock_info", r == 0 && ci.mult && ci.shift && ci.mask, d);
	if (r == 0) {
		long long w0 = now_ns(CLOCK_REALTIME);
		unsigned long long t = 0;
		int rr = raw_clock(ctx, &t);
		long long w1 = now_ns(CLOCK_REALTIME);
		long long ns = (long long)mlx5dv_ts_to_ns(&ci, t);
		snprintf(d, sizeof d, "r %d realtime %lld..%lld, converted %lld", rr, w0, w1, ns);
		/* Within 2 ms (the page's base is taken by two reads, one second ago at most). */
		check("ts_to_ns_is_realtime", !rr && ns > w0 - 2000000 && ns < w1 + 2000000, d);
	}
	struct mlx5dv_context dv = {.comp_mask = MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE};
	r = mlx5dv_query_device(ctx, &dv);
	snprintf(d, sizeof d, "r %d comp_mask %#llx period %llu", r,
		 (unsigned long long)dv.comp_mask,
		 (unsigned long long)dv.max_clock_info_update_nsec);
	check("max_clock_info_update_nsec",
	      r == 0 && (dv.comp_mask & MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE) &&
		      dv.max_clock_info_update_nsec == 1000000000ULL,
	      d);

	/* What mlx5_ib's mmap refuses. MLX5_IB_MMAP_CORE_CLOCK is command 5,
	 * MLX5_IB_MMAP_CLOCK_INFO command 7 (bits 8..16 of the page offset). */
	r = mmap_errno(ctx, 4096, PROT_READ | PROT_WRITE, 5 << 8);
	snprintf(d, sizeof d, "errno %d", r);
	check("core_clock_writable_eperm", r == EPERM, d);
	r = mmap_errno(ctx, 4096, PROT_READ, 5 << 8);
	snprintf(d, sizeof d, "errno %d", r);
	check("core_clock_read_only_maps", r == 0, d);
	r = mmap_errno(ctx, 8192, PROT_READ, 7 << 8);
	snprintf(d, sizeof d, "errno %d", r);
	check("clock_info_two_pages_einval", r == EINVAL, d);
	r = mmap_errno(ctx, 4096, PROT_READ, (7 << 8) | 1);
	snprintf(d, sizeof d, "errno %d", r);
	check("clock_info_index_1_eopnotsupp", r == EOPNOTSUPP, d);
	r = mmap_errno(ctx, 4096, PROT_READ | PROT_WRITE, 7 << 8);
	snprintf(d, sizeof d, "errno %d", r);
	check("clock_info_writable_eperm", r == EPERM, d);

	check("close_device", ibv_close_device(ctx) == 0, "failed");
	ibv_free_device_list(list);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
