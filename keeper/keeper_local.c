/*
 * keeper_local — the registry of the local keeper (agent-runner-keeper): the local provider
 * alone. Linked ahead of libengine.a, it stands in for engine/provider/provider_registry.c, so
 * the Daytona provider and what it needs (libcurl, OpenSSL) stay out of the program that every
 * local sandbox starts; a remote sandbox's keeper is agent-runner-keeper-remote (the whole
 * registry), which the worker starts for a remote provider (environment/env_start.c).
 */
#include "provider/provider.h"

#include "base/util.h"

const struct provider_ops *const provider_registry[] = {&provider_local};
const size_t provider_registry_len = ARRAY_SIZE(provider_registry);
