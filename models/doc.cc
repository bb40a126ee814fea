#include "doc.h"

#include <yaml-cpp/yaml.h>

#include <cstdio>

namespace tierflow::models::internal {

bool IsJsonNumber(const std::string& s) {
  size_t i = 0;
  const auto digits = [&] {
    const size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > from;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i < s.size() && s[i] == '0') {
    ++i;
  } else if (i >= s.size() || s[i] < '1' || s[i] > '9' || !digits()) {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

void AppendJsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\t': *out += "\\t"; break;
      case '\r': *out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += c;
        }
    }
  }
  *out += '"';
}

Doc Doc::Plain(std::string text) {
  Doc d(Kind::kPlain, false);
  d.text_ = std::move(text);
  return d;
}

Doc Doc::Quoted(std::string text) {
  Doc d(Kind::kQuoted, false);
  d.text_ = std::move(text);
  return d;
}

Doc& Doc::Add(std::string key, Doc value) {
  items_.emplace_back(std::move(key), std::move(value));
  return *this;
}

Doc& Doc::Push(Doc value) {
  items_.emplace_back(std::string(), std::move(value));
  return *this;
}

std::string Doc::Yaml() const {
  std::string out;
  YamlEntries(0, &out);
  return out;
}

void Doc::YamlFlow(std::string* out) const {
  switch (kind_) {
    case Kind::kPlain: *out += text_; return;
    case Kind::kQuoted: {
      YAML::Emitter e;
      e << YAML::DoubleQuoted << text_;
      *out += e.c_str();
      return;
    }
    case Kind::kMap:
    case Kind::kList: {
      const bool map = kind_ == Kind::kMap;
      *out += map ? '{' : '[';
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i > 0) *out += ", ";
        if (map) *out += items_[i].first + ": ";
        items_[i].second.YamlFlow(out);
      }
      *out += map ? '}' : ']';
      return;
    }
  }
}

// A map's entries at `indent`; a block list's items, each "- " and its map's entries (the first
// on the dash's line) or its scalar.
void Doc::YamlEntries(int indent, std::string* out) const {
  const std::string pad(static_cast<size_t>(indent), ' ');
  for (const auto& [key, value] : items_) {
    *out += pad + key + ":";
    const bool block = (value.kind_ == Kind::kMap || value.kind_ == Kind::kList) && !value.flow_ && !value.items_.empty();
    if (!block) {
      *out += ' ';
      value.YamlFlow(out);
      *out += '\n';
    } else if (value.kind_ == Kind::kMap) {
      *out += '\n';
      value.YamlEntries(indent + 2, out);
    } else {
      *out += '\n';
      for (const auto& [unused, item] : value.items_) {
        std::string lines;
        if (item.kind_ == Kind::kMap && !item.flow_ && !item.items_.empty()) {
          item.YamlEntries(indent + 4, &lines);
          lines.replace(0, static_cast<size_t>(indent + 4), std::string(static_cast<size_t>(indent + 2), ' ') + "- ");
        } else {
          lines = std::string(static_cast<size_t>(indent + 2), ' ') + "- ";
          item.YamlFlow(&lines);
          lines += '\n';
        }
        *out += lines;
      }
    }
  }
}

std::string Doc::Json() const {
  std::string out;
  JsonValue(&out);
  return out;
}

void Doc::JsonValue(std::string* out) const {
  switch (kind_) {
    case Kind::kPlain:
      if (text_ == "true" || text_ == "false" || IsJsonNumber(text_)) *out += text_;
      else AppendJsonString(text_, out);
      return;
    case Kind::kQuoted: AppendJsonString(text_, out); return;
    case Kind::kMap:
    case Kind::kList: {
      const bool map = kind_ == Kind::kMap;
      *out += map ? '{' : '[';
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i > 0) *out += ", ";
        if (map) {
          AppendJsonString(items_[i].first, out);
          *out += ": ";
        }
        items_[i].second.JsonValue(out);
      }
      *out += map ? '}' : ']';
      return;
    }
  }
}

}  // namespace tierflow::models::internal
