// Building blocks shared by the policy generators: what the model and training setup imply
// (parameter units, per-rank partitions, optimizer sub-groups, FLOPs), a schedule builder with
// the standard device, resource and pool names, and the three pipelines every offloading system
// has — fetch a parameter unit, flush its gradient, sweep the optimizer over sub-groups — with
// the options in which the systems differ.
// Each stage has its own header, in pipeline order; this one includes them all.
#pragma once

#include "model_plan.h"        // parameter units, partitions, sub-groups
#include "schedule_builder.h"  // devices, resources, pools, buffers, tasks, state tensors
#include "fetch.h"             // a unit's parameters to the GPU
#include "passes.h"            // forward and backward, the gradients' path
#include "optimizer_sweep.h"   // the gradient check, the optimizer over sub-groups
#include "gpu_update.h"        // a sub-group's update on the GPU
