#pragma once
/* rdma-core surface for mlx5 device memory (MEMIC): context, PD, DM allocation and registration.
 * Most DM calls are static inline in verbs.h; bindgen wraps them (see build.rs). */
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

static const unsigned int NMDP_IBV_ACCESS_LOCAL_WRITE = IBV_ACCESS_LOCAL_WRITE;
static const unsigned int NMDP_IBV_ACCESS_ZERO_BASED = IBV_ACCESS_ZERO_BASED;
