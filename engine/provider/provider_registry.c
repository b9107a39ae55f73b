/* provider_registry — every sandbox provider of this runner (provider.h: provider_registry). */
#include "provider/provider.h"

#include "base/util.h"

/* A remote provider adds its ops here. */
const struct provider_ops *const provider_registry[] = {&provider_local, &provider_daytona};
const size_t provider_registry_len = ARRAY_SIZE(provider_registry);
