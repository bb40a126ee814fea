// Private to models/: one description of a value's fields for both of its texts — the YAML that
// users read and edit (scenarios, hardware files, `calibrate`'s profile) and the JSON of a
// schedule file's typed sections (Schedule::Sections) — so that LlmToYaml and LlmToJson (and the
// hardware's and training's) write the same keys and values from one field list.
//
// A Doc is a map (keys in order), a list, or a scalar: a plain scalar's text (a number, true or
// false, a word, a value with its unit "7 B/s") or a string always quoted. Yaml() writes block
// style, two spaces a level, a flow map or list inline ("{lr: 0.001, betas: [0.9, 0.999]}"), an
// empty list as "[]", a quoted string as yaml-cpp's double-quoted scalar. Json() writes the JSON
// that reading Yaml() back and writing it as YAML trees are written as JSON (YamlToJson) gives:
// a plain scalar that is true, false or a JSON number bare, every other scalar a string.
// Keys and plain scalars are written as given: the caller's keys are fixed names, and a plain
// scalar must not be one YAML reads otherwise ("", "null", "~", a text with ": "): quote those.
// A list inside a block list is written in flow style.
//
// Thread safety: values.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tierflow::models::internal {

// What YAML reads as a JSON number in a plain scalar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
bool IsJsonNumber(const std::string& s);
// `s` as a JSON string (quoted, escaped), appended to *out.
void AppendJsonString(const std::string& s, std::string* out);

class Doc {
 public:
  static Doc Map(bool flow = false) { return Doc(Kind::kMap, flow); }
  static Doc List(bool flow = false) { return Doc(Kind::kList, flow); }
  static Doc Plain(std::string text);
  static Doc Quoted(std::string text);

  // A map's next entry (keys unique: the caller's), a list's next item.
  Doc& Add(std::string key, Doc value);
  Doc& Push(Doc value);

  // The whole document, a map: one "key: value" line each, ending with a newline.
  std::string Yaml() const;
  std::string Json() const;

 private:
  enum class Kind { kMap, kList, kPlain, kQuoted };
  Doc(Kind kind, bool flow) : kind_(kind), flow_(flow) {}
  void YamlEntries(int indent, std::string* out) const;
  void YamlFlow(std::string* out) const;
  void JsonValue(std::string* out) const;

  Kind kind_;
  bool flow_ = false;
  std::string text_;
  std::vector<std::pair<std::string, Doc>> items_;  // a list's keys are empty
};

}  // namespace tierflow::models::internal
