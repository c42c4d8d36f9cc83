/* Compiles every public SDK header as C99: the ABI must stay usable from plain C. */
#include "zhost/zhost.h"
int zhost_header_check_c(void) { return ZHOST_ABI_MAJOR; }
