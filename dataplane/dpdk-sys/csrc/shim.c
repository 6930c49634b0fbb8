/* Small C shim for what bindgen cannot express (see wrapper.h). */
#include "wrapper.h"

int nmdp_rte_errno(void) { return rte_errno; }
