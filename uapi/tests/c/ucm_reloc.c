/* UCX's UCM with UCX_MEM_MMAP_HOOK_MODE=reloc and no RDMA device, no ferroverbs: asks
 * for the memory events a registration cache needs (ucs_rcache_create:
 * UCM_EVENT_VM_MAPPED | UCM_EVENT_VM_UNMAPPED), then mallocs. The program needs only
 * libucs; libucm comes as libucs's dependency, so libc.so.6 precedes libucm.so.0 in
 * the global search order, as for ucx_info and ucx_perftest. Prints the status of
 * ucm_set_event_handler and "done". (tests/uapi_ucx.rs runs it: in reloc mode it
 * never returns from ucm_set_event_handler unless libucm comes before libc.) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*ucm_event_callback)(int, void *, void *);
typedef int (*ucm_set_event_handler_fn)(int, int, ucm_event_callback, void *);

static void on_event(int type, void *event, void *arg)
{
	(void)type;
	(void)event;
	(void)arg;
}

int main(void)
{
	ucm_set_event_handler_fn set =
		(ucm_set_event_handler_fn)dlsym(RTLD_DEFAULT, "ucm_set_event_handler");
	if (!set) {
		fprintf(stderr, "no ucm_set_event_handler: %s\n", dlerror());
		return 2;
	}
	/* UCM_EVENT_VM_MAPPED (bit 16) | UCM_EVENT_VM_UNMAPPED (bit 17), ucm/api/ucm.h */
	int s = set((1 << 16) | (1 << 17), 1000, on_event, NULL);
	printf("ucm_set_event_handler: %d\n", s);
	fflush(stdout);
	free(malloc(1 << 20));
	printf("done\n");
	return 0;
}
