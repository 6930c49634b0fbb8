/* Small C shim for what bindgen cannot express (see wrapper.h). */
#include "wrapper.h"
#include <string.h>
#include <rte_ring.h>

int nmdp_rte_errno(void) { return rte_errno; }

/* ---- The spill mempool driver (see wrapper.h) ---------------------------------------------- */

struct nmdp_spill {
    struct rte_ring *nic;
    struct rte_ring *host;
    uint64_t lo, hi;     /* nicmem window of mbuf buf_addr; empty until set */
    uint64_t spilled;    /* objects dequeued from the host side (atomic) */
};

static int nmdp_spill_alloc(struct rte_mempool *mp) {
    char name[RTE_RING_NAMESIZE];
    unsigned int size = rte_align32pow2(mp->size + 1);
    struct nmdp_spill *s = rte_zmalloc_socket("nmdp_spill", sizeof(*s), RTE_CACHE_LINE_SIZE,
                                              mp->socket_id);
    if (s == NULL)
        return -ENOMEM;
    /* Multi-producer/multi-consumer: a Tx completion on any lcore may free into the pool. */
    snprintf(name, sizeof(name), "nmN%s", mp->name);
    s->nic = rte_ring_create(name, size, mp->socket_id, 0);
    snprintf(name, sizeof(name), "nmH%s", mp->name);
    s->host = rte_ring_create(name, size, mp->socket_id, 0);
    if (s->nic == NULL || s->host == NULL) {
        int e = rte_errno;
        rte_ring_free(s->nic);
        rte_ring_free(s->host);
        rte_free(s);
        return -e;
    }
    mp->pool_data = s;
    return 0;
}

static void nmdp_spill_free(struct rte_mempool *mp) {
    struct nmdp_spill *s = mp->pool_data;
    if (s == NULL)
        return;
    rte_ring_free(s->nic);
    rte_ring_free(s->host);
    rte_free(s);
    mp->pool_data = NULL;
}

static inline int nmdp_spill_is_nic(const struct nmdp_spill *s, const void *obj) {
    uint64_t a = (uint64_t)(uintptr_t)((const struct rte_mbuf *)obj)->buf_addr;
    return a >= s->lo && a < s->hi;
}

static int nmdp_spill_enqueue(struct rte_mempool *mp, void *const *objs, unsigned int n) {
    struct nmdp_spill *s = mp->pool_data;
    void *nic[64], *host[64];
    unsigned int i = 0;
    while (i < n) {
        unsigned int nn = 0, nh = 0, end = RTE_MIN(n, i + 64);
        for (; i < end; i++) {
            if (nmdp_spill_is_nic(s, objs[i]))
                nic[nn++] = objs[i];
            else
                host[nh++] = objs[i];
        }
        /* The rings hold the whole pool, so these cannot fail for objects of this pool. */
        if (nn && rte_ring_enqueue_bulk(s->nic, nic, nn, NULL) != nn)
            return -ENOBUFS;
        if (nh && rte_ring_enqueue_bulk(s->host, host, nh, NULL) != nh)
            return -ENOBUFS;
    }
    return 0;
}

static int nmdp_spill_dequeue(struct rte_mempool *mp, void **objs, unsigned int n) {
    struct nmdp_spill *s = mp->pool_data;
    unsigned int k = rte_ring_dequeue_burst(s->nic, objs, n, NULL);
    if (k == n)
        return 0;
    if (rte_ring_dequeue_bulk(s->host, objs + k, n - k, NULL) == n - k) {
        __atomic_fetch_add(&s->spilled, n - k, __ATOMIC_RELAXED);
        return 0;
    }
    /* All or nothing, like every mempool driver: give the nicmem buffers back. */
    if (k)
        rte_ring_enqueue_bulk(s->nic, objs, k, NULL);
    return -ENOBUFS;
}

static unsigned int nmdp_spill_count(const struct rte_mempool *mp) {
    const struct nmdp_spill *s = mp->pool_data;
    return rte_ring_count(s->nic) + rte_ring_count(s->host);
}

static struct rte_mempool_ops nmdp_spill_ops = {
    .name = "nmdp_spill",
    .alloc = nmdp_spill_alloc,
    .free = nmdp_spill_free,
    .enqueue = nmdp_spill_enqueue,
    .dequeue = nmdp_spill_dequeue,
    .get_count = nmdp_spill_count,
};

int nmdp_spill_register(void) {
    static int idx = -1;
    if (idx < 0)
        idx = rte_mempool_register_ops(&nmdp_spill_ops);
    return idx < 0 ? idx : 0;
}

int nmdp_spill_set_window(struct rte_mempool *mp, uint64_t lo, uint64_t hi) {
    struct nmdp_spill *s = mp->pool_data;
    void *objs[64];
    unsigned int n, total;
    if (strcmp(rte_mempool_get_ops(mp->ops_index)->name, "nmdp_spill") != 0 || s == NULL)
        return -EINVAL;
    s->lo = lo;
    s->hi = hi;
    /* Populating enqueued every buffer (to the host side) before the pool knew the window:
     * re-sort them once. */
    total = rte_ring_count(s->host);
    for (unsigned int moved = 0; moved < total; moved += n) {
        n = rte_ring_dequeue_burst(s->host, objs, 64, NULL);
        if (n == 0)
            break;
        if (nmdp_spill_enqueue(mp, objs, n) != 0)
            return -ENOBUFS;
    }
    return 0;
}

int nmdp_spill_stats(const struct rte_mempool *mp, struct nmdp_spill_stats *out) {
    const struct nmdp_spill *s = mp->pool_data;
    if (strcmp(rte_mempool_get_ops(mp->ops_index)->name, "nmdp_spill") != 0 || s == NULL ||
        out == NULL)
        return -EINVAL;
    out->nic_free = rte_ring_count(s->nic);
    out->host_free = rte_ring_count(s->host);
    out->spilled = __atomic_load_n(&s->spilled, __ATOMIC_RELAXED);
    return 0;
}

/* ---- Packed pktmbuf pools (see wrapper.h) ----------------------------------------------------- */

/* A pool created with RTE_MEMPOOL_F_NO_IOVA_CONTIG records no IOVA for its objects (RTE_BAD_IOVA,
 * so rte_pktmbuf_init leaves buf_iova garbage). With IOVA = VA the IOVA of any byte is its
 * address: write it into the object header and the mbuf. */
static void nmdp_set_va_iova(struct rte_mempool *mp, void *opaque, void *obj, unsigned int idx) {
    struct rte_mbuf *m = obj;
    (void)mp;
    (void)opaque;
    (void)idx;
    rte_mempool_get_header(obj)->iova = (rte_iova_t)(uintptr_t)obj;
    m->buf_iova = (rte_iova_t)(uintptr_t)m->buf_addr;
}

struct rte_mempool *nmdp_pktmbuf_pool_create_packed(const char *name, unsigned int n,
                                                    unsigned int cache, uint16_t priv_size,
                                                    uint16_t data_room, int socket) {
    struct rte_pktmbuf_pool_private mbp = {
        .mbuf_data_room_size = data_room,
        .mbuf_priv_size = priv_size,
        .flags = 0,
    };
    unsigned int flags = 0;
    struct rte_mempool *mp;
    int ret;
    /* With IOVA = VA, an object that crosses a page boundary is still contiguous for the device. */
    if (rte_eal_iova_mode() == RTE_IOVA_VA)
        flags |= RTE_MEMPOOL_F_NO_IOVA_CONTIG;
    mp = rte_mempool_create_empty(name, n, sizeof(struct rte_mbuf) + priv_size + data_room, cache,
                                  sizeof(mbp), socket, flags);
    if (mp == NULL)
        return NULL;
    ret = rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), NULL);
    if (ret != 0) {
        rte_mempool_free(mp);
        rte_errno = -ret;
        return NULL;
    }
    rte_pktmbuf_pool_init(mp, &mbp);
    ret = rte_mempool_populate_default(mp);
    if (ret < 0) {
        rte_mempool_free(mp);
        rte_errno = -ret;
        return NULL;
    }
    rte_mempool_obj_iter(mp, rte_pktmbuf_init, NULL);
    if (flags & RTE_MEMPOOL_F_NO_IOVA_CONTIG)
        rte_mempool_obj_iter(mp, nmdp_set_va_iova, NULL);
    return mp;
}
