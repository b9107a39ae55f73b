/*
 * suites_platform — the unit-test suites of platform mode (engine/agenta: redact, agenta_config,
 * agenta_bodies, agenta_disposition, agenta_api, ids, records, reconstruct, heartbeat,
 * platform, platform_attach) and the helper they share. Kept apart from suites.h so the
 * registration in main.c is the only edit to a shared test file.
 */
#ifndef AR_TEST_SUITES_PLATFORM_H
#define AR_TEST_SUITES_PLATFORM_H

#include <CUnit/CUnit.h>

#include "agenta/agenta_api.h"

extern CU_TestInfo redact_tests[];
extern CU_TestInfo agenta_config_tests[];
extern CU_TestInfo agenta_bodies_tests[];
extern CU_TestInfo agenta_disposition_tests[];
extern CU_TestInfo agenta_api_tests[];
extern CU_TestInfo ids_tests[];
extern CU_TestInfo records_tests[];
extern CU_TestInfo reconstruct_tests[];
extern CU_TestInfo heartbeat_tests[];
extern CU_TestInfo platform_tests[];
extern CU_TestInfo platform_attach_tests[];

/* A platform configuration pointing at url (replica "replica-1", defaults otherwise). */
int test_agenta_config(const char *url, struct agenta_config *ret);

#endif
