/* Test library for the ibv_reg_mr_iova2 interposer: a shared object that registers memory the way
 * the mlx5 PMD does (ibv_reg_mr with a non-constant access, i.e. ibv_reg_mr_iova2@IBVERBS_1.8). */
#include <infiniband/verbs.h>

struct ibv_mr *nmdp_test_reg(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return ibv_reg_mr(pd, addr, len, access);
}
