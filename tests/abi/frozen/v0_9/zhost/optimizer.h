/* zhost/optimizer.h: the optimizer a job trains with, as the host describes it to partition plugins
 * (zhost/partition.h, zhost_partition_setup) and partition plugins describe it to computing offload tiers
 * (zhost/offload.h, zhost_tier_optimizer_setup). Its own header since 0.4, so that each of those includes
 * only what it uses.
 */
#ifndef ZHOST_OPTIMIZER_H
#define ZHOST_OPTIMIZER_H

#include "zhost/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zhost_optimizer_kind {
  ZHOST_OPTIMIZER_ADAMW = 1, /* decoupled weight decay (torch.optim.AdamW) */
  ZHOST_OPTIMIZER_ADAM = 2,  /* L2 weight decay (torch.optim.Adam) */
  ZHOST_OPTIMIZER_SGD = 3,   /* momentum SGD, L2 weight decay */
  ZHOST_OPTIMIZER_LION = 4   /* sign update, decoupled weight decay */
} zhost_optimizer_kind;

typedef struct zhost_optimizer_desc {
  size_t struct_size;
  const zhost_ext_header* ext;
  zhost_optimizer_kind kind;
  double beta1;
  double beta2;
  double eps;
  double weight_decay;
  double momentum;         /* SGD */
  int32_t bias_correction; /* Adam kinds */
} zhost_optimizer_desc;
#define ZHOST_OPTIMIZER_DESC_SIZE ZHOST_STRUCT_SIZE(zhost_optimizer_desc, bias_correction)
#define ZHOST_OPTIMIZER_DESC_MIN_SIZE ZHOST_STRUCT_SIZE(zhost_optimizer_desc, bias_correction) /* since 0.1 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_optimizer_desc, ZHOST_OPTIMIZER_DESC_SIZE);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_OPTIMIZER_H */
