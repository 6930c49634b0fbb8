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
#include <rte_ethdev.h>
#include <rte_version.h>

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
static const int NMDP_SOCKET_ID_ANY = SOCKET_ID_ANY;
static const int NMDP_VERSION_YEAR = RTE_VER_YEAR;
static const int NMDP_VERSION_MONTH = RTE_VER_MONTH;

/* Shim (csrc/shim.c): things bindgen cannot reach. */
/* rte_errno is a thread-local per-lcore variable: read it through a function. */
int nmdp_rte_errno(void);
