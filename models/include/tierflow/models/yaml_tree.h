// Whole YAML trees as the scenario, hardware and model readers take them: `--set key.path=value`
// overrides applied to a tree, the check of a map's keys, and a tree written as JSON (the typed
// sections of a schedule file hold the same keys and values as the scenario's YAML).
//
// Thread safety: pure functions over the nodes given.
#pragma once

#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "tierflow/core/status.h"

namespace tierflow::models {

// Applies one "a.b.c=value" override (the value read as YAML) to `root`, creating maps on the
// way. InvalidArgument naming the override when it has no '=', an empty key, or a key path
// through a value that is not a map.
Status ApplyYamlOverride(YAML::Node root, const std::string& text);

// InvalidArgument "<where>: unknown key 'k' (known: ...)" for the first key of the map `node`
// not in `keys`, or "<where>: expected a map".
Status CheckYamlKeys(const YAML::Node& node, const std::string& where, std::initializer_list<const char*> keys);

// `text` as a YAML tree, checked at the door: UTF-8 (CheckUtf8), valid YAML, and no map with a
// key twice (yaml-cpp would keep the first silently). InvalidArgument naming `origin`, and the
// line and key of a duplicate.
StatusOr<YAML::Node> LoadYamlText(std::string_view text, const std::string& origin);

// `node` as JSON text: maps as objects (keys in order), sequences as arrays, scalars that are
// JSON numbers, true, false or null as such and every other scalar as a string. Reading the text
// back as YAML gives the same tree.
std::string YamlToJson(const YAML::Node& node);

}  // namespace tierflow::models
