/*
 * request_sections — a run request's smaller sections: harnessFiles and skills (into the
 * request's arrays), permissions, sandboxPermission, lifecycle and telemetry. Each reads its
 * borrowed JSON (already of the section's type) and refuses like every request_* parser:
 * AR_E_INVALID_REQUEST with the message, naming the field, in the context's err; -ENOMEM.
 */
#ifndef AR_REQUEST_SECTIONS_H
#define AR_REQUEST_SECTIONS_H

#include <json-c/json.h>

#include "core/contracts.h"
#include "request/request_fields.h"

int rq_harness_files(struct rq_ctx *c, json_object *arr, struct run_request *req);
int rq_skills(struct rq_ctx *c, json_object *arr, struct run_request *req);
int rq_permissions(struct rq_ctx *c, json_object *o);
int rq_sandbox_permission(struct rq_ctx *c, json_object *o, struct run_request *req);
int rq_lifecycle(struct rq_ctx *c, json_object *o, struct run_request *req);
/* modelGateway {allowedModels?: [model, ...]}: the calls the sandbox's model gateway forwards */
int rq_model_gateway(struct rq_ctx *c, json_object *o, struct run_request *req);
int rq_telemetry(struct rq_ctx *c, json_object *o);

#endif
