// A planner request for a named model and cluster (the plan tests' common start).
#pragma once
#include <string>

#include "meshtrain/plan/planner.h"

inline meshtrain::plan::PlanRequest plan_request(const std::string& model, const std::string& cluster,
                                                 int64_t gpus, int64_t batch) {
  meshtrain::plan::PlanRequest r;
  r.model = *meshtrain::plan::shape_preset(model);
  r.cluster = meshtrain::plan::ClusterSpec::load(cluster);
  r.gpus = gpus;
  r.global_batch = batch;
  return r;
}
