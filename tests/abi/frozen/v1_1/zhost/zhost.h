/* zhost/zhost.h: the whole public C ABI of zhost in one include. Plugin authors start here. */
#ifndef ZHOST_ZHOST_H
#define ZHOST_ZHOST_H
#include "zhost/collective.h"
#include "zhost/core.h"
#include "zhost/descriptor.h"
#include "zhost/host.h"
#include "zhost/optimizer.h"
#include "zhost/partition.h"
#include "zhost/plugin.h"
#include "zhost/storage.h"
#endif
