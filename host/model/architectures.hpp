// host/model/architectures.hpp: constructors of the built-in architectures (internal to zhost_model;
// make_model in model.hpp picks one from the spec's type).
#pragma once

#include <memory>

#include "host/model/model.hpp"

namespace zhost::model {

// Each takes a spec already checked and resolved by resolve_spec.
std::unique_ptr<Model> make_mlp(const ModelSpec& spec, const Placement& placement);
std::unique_ptr<Model> make_gpt(const ModelSpec& spec, const Placement& placement);
std::unique_ptr<Model> make_llama(const ModelSpec& spec, const Placement& placement);
// A Hugging Face model folder (hf.cpp); the spec's dimensions were filled from its config.json.
std::unique_ptr<Model> make_hf(const ModelSpec& spec, const Placement& placement);
// The dimensions of the Hugging Face model in spec.path (config.json), checked against spec.seq_len.
ModelSpec resolve_hf_spec(const ModelSpec& spec);

}  // namespace zhost::model
