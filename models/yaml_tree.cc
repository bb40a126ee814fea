#include "tierflow/models/yaml_tree.h"

#include "tierflow/core/text.h"
#include "doc.h"

#include <string_view>
#include <sstream>
#include <vector>

namespace tierflow::models {
namespace {

std::string Q(const std::string& s) { return Quoted(s); }

void Write(const YAML::Node& node, std::string* out) {
  if (node.IsMap()) {
    *out += "{";
    bool first = true;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!first) *out += ", ";
      first = false;
      internal::AppendJsonString(it->first.Scalar(), out);
      *out += ": ";
      Write(it->second, out);
    }
    *out += "}";
  } else if (node.IsSequence()) {
    *out += "[";
    for (size_t i = 0; i < node.size(); ++i) {
      if (i > 0) *out += ", ";
      Write(node[i], out);
    }
    *out += "]";
  } else if (!node.IsDefined() || node.IsNull()) {
    *out += "null";
  } else {
    const std::string& s = node.Scalar();
    const bool plain = node.Tag() != "!";  // a quoted scalar ("7") stays a string
    if (plain && (s == "true" || s == "false" || internal::IsJsonNumber(s))) *out += s;
    else internal::AppendJsonString(s, out);
  }
}

Status CheckDuplicateKeys(const YAML::Node& node, const std::string& origin, const std::string& path) {
  if (node.IsMap()) {
    std::vector<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
      const std::string at = path.empty() ? key : path + "." + key;
      for (const std::string& k : seen) {
        if (k == key) {
          return InvalidArgument(origin + ": line " + std::to_string(it->first.Mark().line + 1) + ": key '" + at +
                                 "' appears twice (the first would be used silently)");
        }
      }
      seen.push_back(key);
      TF_RETURN_IF_ERROR(CheckDuplicateKeys(it->second, origin, at));
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) TF_RETURN_IF_ERROR(CheckDuplicateKeys(node[i], origin, path + "[" + std::to_string(i) + "]"));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<YAML::Node> LoadYamlText(std::string_view text, const std::string& origin) {
  TF_RETURN_IF_ERROR(CheckUtf8(text, origin));
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(origin + ": not valid YAML: " + e.what());
  }
  TF_RETURN_IF_ERROR(CheckDuplicateKeys(root, origin, ""));
  return root;
}

Status ApplyYamlOverride(YAML::Node root, const std::string& text) {
  TF_RETURN_IF_ERROR(CheckUtf8(text, "--set"));
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgument("--set " + Q(text) + ": expected key.path=value");
  }
  const std::string path = text.substr(0, eq);
  const std::string value = text.substr(eq + 1);
  std::vector<std::string> keys;
  std::stringstream ss(path);
  for (std::string k; std::getline(ss, k, '.');) {
    if (k.empty()) return InvalidArgument("--set " + Q(text) + ": empty key in path " + Q(path));
    keys.push_back(k);
  }
  try {
    // yaml-cpp's operator[] on a temporary is awkward; walk with explicit nodes.
    std::vector<YAML::Node> chain{root};
    for (size_t i = 0; i + 1 < keys.size(); ++i) {
      YAML::Node next = chain.back()[keys[i]];
      if (next.IsDefined() && !next.IsNull() && !next.IsMap()) {
        return InvalidArgument("--set " + Q(text) + ": " + Q(keys[i]) + " is not a section");
      }
      if (!next.IsDefined() || next.IsNull()) {
        chain.back()[keys[i]] = YAML::Node(YAML::NodeType::Map);
        next = chain.back()[keys[i]];
      }
      chain.push_back(next);
    }
    chain.back()[keys.back()] = YAML::Load(value.empty() ? "''" : value);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("--set " + Q(text) + ": " + e.what());
  }
  return Status::Ok();
}

Status CheckYamlKeys(const YAML::Node& node, const std::string& where, std::initializer_list<const char*> keys) {
  if (!node.IsMap()) return InvalidArgument(where + ": expected a map");
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string k = it->first.as<std::string>();
    bool known = false;
    for (const char* allowed : keys) known |= (k == allowed);
    if (!known) {
      std::string list;
      for (const char* allowed : keys) list += (list.empty() ? "" : ", ") + std::string(allowed);
      return InvalidArgument(where + ": unknown key " + Q(k) + " (known: " + list + ")");
    }
  }
  return Status::Ok();
}

std::string YamlToJson(const YAML::Node& node) {
  std::string out;
  Write(node, &out);
  return out;
}

}  // namespace tierflow::models
