#pragma once
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* cpu_set_t, hence rte_cpuset_t and rte_thread_set_affinity */
#endif
/* The DPDK surface nmdp binds (bindgen input; also force-included into the generated wrappers).
 * Must be compiled with the exact `pkg-config --cflags libdpdk` flags: without `-include
 * rte_config.h` (RTE_IOVA_AS_PA=1 on Debian) struct rte_mbuf silently gets another layout. */
#include <rte_config.h>
#include <rte_common.h>
#include <rte_errno.h>
#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_dev.h>
#include <rte_memory.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_malloc.h>
#include <rte_ethdev.h>
#include <rte_version.h>
#include <rte_telemetry.h>

/* RTE_BIT64() flags are function-like macros bindgen does not evaluate; these constants are. */
static const uint64_t NMDP_RX_OFFLOAD_SCATTER = RTE_ETH_RX_OFFLOAD_SCATTER;
static const uint64_t NMDP_RX_OFFLOAD_BUFFER_SPLIT = RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT;
static const uint64_t NMDP_RX_OFFLOAD_RSS_HASH = RTE_ETH_RX_OFFLOAD_RSS_HASH;
static const uint64_t NMDP_TX_OFFLOAD_MULTI_SEGS = RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
static const uint64_t NMDP_TX_OFFLOAD_MBUF_FAST_FREE = RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
static const uint64_t NMDP_RSS_IP = RTE_ETH_RSS_IP;
static const uint64_t NMDP_RSS_UDP = RTE_ETH_RSS_UDP;
static const uint64_t NMDP_RSS_TCP = RTE_ETH_RSS_TCP;
static const uint64_t NMDP_MBUF_F_RX_RSS_HASH = RTE_MBUF_F_RX_RSS_HASH;
static const uint64_t NMDP_MBUF_F_EXTERNAL = RTE_MBUF_F_EXTERNAL;
static const uint64_t NMDP_MBUF_F_INDIRECT = RTE_MBUF_F_INDIRECT;
static const uint32_t NMDP_PKTMBUF_HEADROOM = RTE_PKTMBUF_HEADROOM;
static const uint32_t NMDP_MBUF_DEFAULT_BUF_SIZE = RTE_MBUF_DEFAULT_BUF_SIZE;
static const uint32_t NMDP_MAX_ETHPORTS = RTE_MAX_ETHPORTS;
static const uint32_t NMDP_MAX_LCORE = RTE_MAX_LCORE;
static const uint32_t NMDP_LCORE_ID_ANY = LCORE_ID_ANY;
static const uint32_t NMDP_ETH_MQ_RX_RSS = RTE_ETH_MQ_RX_RSS;
static const uint32_t NMDP_ETH_MQ_RX_NONE = RTE_ETH_MQ_RX_NONE;
static const uint32_t NMDP_ETH_DEV_INTR_LSC = RTE_ETH_DEV_INTR_LSC;
static const int NMDP_SOCKET_ID_ANY = SOCKET_ID_ANY;
static const int NMDP_VERSION_YEAR = RTE_VER_YEAR;
static const int NMDP_VERSION_MONTH = RTE_VER_MONTH;

/* Shim (csrc/shim.c): things bindgen cannot reach. */
/* rte_errno is a thread-local per-lcore variable: read it through a function. */
int nmdp_rte_errno(void);

/* The spill mempool driver (csrc/shim.c): a payload pool over two memories, on-NIC memory
 * (primary) and host memory (secondary). Allocation prefers buffers in the nicmem window and
 * spills to host buffers only when none is left; a freed buffer returns to the side its address
 * belongs to. This gives a hardware buffer split (mlx5), which draws every payload segment from
 * one mempool, the paper's primary/secondary Rx rings. */
/* Registers the driver once per process; returns 0 or a negative errno. */
int nmdp_spill_register(void);
/* Sets the nicmem window [lo, hi) of a pool using the driver (by mbuf buf_addr) and re-sorts the
 * buffers already in it. Call before the pool is used. Returns 0 or a negative errno. */
int nmdp_spill_set_window(struct rte_mempool *mp, uint64_t lo, uint64_t hi);
/* Buffers free on each side, and buffers handed out from the host side since creation. */
struct nmdp_spill_stats {
    uint32_t nic_free;
    uint32_t host_free;
    uint64_t spilled;
};
int nmdp_spill_stats(const struct rte_mempool *mp, struct nmdp_spill_stats *out);

/* rte_pktmbuf_pool_create, except that when the EAL runs with IOVA = VA the mbufs are packed
 * back to back instead of one per page: without hugepages a 2.3 KiB mbuf otherwise sits alone on
 * a 4 KiB page, every mbuf header lands in the same L1 cache set and the fast path thrashes it.
 * A packed mbuf may cross a page, which is fine for a device only when IOVA = VA; each mbuf's
 * IOVA is then set to its address. Returns NULL with rte_errno set on failure. */
struct rte_mempool *nmdp_pktmbuf_pool_create_packed(const char *name, unsigned int n,
                                                    unsigned int cache, uint16_t priv_size,
                                                    uint16_t data_room, int socket);
