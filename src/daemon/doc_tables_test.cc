// The documents list the mount options and spec keys of the tables in code
// (daemon/options.h MountOptionTable, spec/spec_keys.h kSpecKeys), no more
// and no fewer, each with the table's default: the option and spec tables
// of docs/reference.md and docs/design.md, and the OPTIONS and JOB SPEC
// sections of man/joaderfs.8. --help and the mount's /README are made from the tables.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/options.h"
#include "spec/spec_keys.h"

namespace joaderfs {
namespace {

std::string ReadDoc(const std::string& relpath) {
  std::ifstream in(std::string(JOADERFS_SOURCE_DIR) + "/" + relpath);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Whitespace collapsed, backticks, quotes and troff's font changes gone.
std::string Plain(std::string text) {
  for (const char* font : {"\\fB", "\\fI", "\\fR", "\\fP"}) {
    for (size_t at; (at = text.find(font)) != std::string::npos;) text.erase(at, 3);
  }
  for (size_t at; (at = text.find("\\-")) != std::string::npos;) text.erase(at, 1);
  std::string out;
  for (char c : text) {
    if (c == '`' || c == '"') continue;
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      // troff sets punctuation after a bold word apart: "-f ,".
      if (std::strchr(",.;:)", c) && !out.empty() && out.back() == ' ') out.pop_back();
      out += c;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// Whether `phrase` occurs in `text` between non-alphanumerics ("0" is not
// in "1024").
bool HasPhrase(const std::string& text, const std::string& phrase) {
  for (size_t at = text.find(phrase); at != std::string::npos; at = text.find(phrase, at + 1)) {
    const size_t end = at + phrase.size();
    const bool left = at == 0 || !std::isalnum(static_cast<unsigned char>(text[at - 1]));
    const bool right = end == text.size() || !std::isalnum(static_cast<unsigned char>(text[end]));
    if (left && right) return true;
  }
  return false;
}

std::vector<std::string> Cells(const std::string& row) {
  std::vector<std::string> cells;
  size_t at = 1;
  while (at < row.size()) {
    size_t end = at;
    while (end < row.size() && !(row[end] == '|' && row[end - 1] != '\\')) ++end;
    cells.push_back(row.substr(at, end - at));
    at = end + 1;
  }
  return cells;
}

// The rows of the markdown table whose header's first cell is `first`: the
// names in each row's first cell (backticked, before the '='; where a row
// has `key=value` tokens, only those, so that "`sampler=dsa` or `isa`"
// names one option; flags such as `-f` left out) and the row's last cell,
// the default.
std::map<std::string, std::string> MarkdownTable(const std::string& doc, const std::string& first) {
  std::map<std::string, std::string> defaults;
  const std::vector<std::string> lines = Lines(doc);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("| " + first + " |", 0) != 0) continue;
    for (size_t j = i + 2; j < lines.size() && lines[j].rfind("|", 0) == 0; ++j) {
      const std::vector<std::string> cells = Cells(lines[j]);
      const std::string& names = cells.front();
      std::vector<std::string> tokens;
      for (size_t at = names.find('`'); at != std::string::npos;) {
        const size_t end = names.find('`', at + 1);
        tokens.push_back(names.substr(at + 1, end - at - 1));
        at = names.find('`', end + 1);
      }
      const bool assignments = std::any_of(tokens.begin(), tokens.end(), [](const std::string& t) {
        return t.find('=') != std::string::npos;
      });
      for (const std::string& token : tokens) {
        if (token.empty() || token[0] == '-') continue;
        if (assignments && token.find('=') == std::string::npos) continue;
        defaults[token.substr(0, token.find('='))] = Plain(cells.back());
      }
    }
    break;
  }
  return defaults;
}

// The entries of a man page section: after each .TP, the name its first
// line sets in bold (up to '='), and the entry's text until the next .TP,
// .SS or .SH, with the markup gone.
std::map<std::string, std::string> ManSection(const std::string& doc, const std::string& section) {
  std::map<std::string, std::string> entries;
  const std::vector<std::string> lines = Lines(doc);
  size_t i = 0;
  while (i < lines.size() && lines[i] != ".SH " + section) ++i;
  std::string name, text;
  auto flush = [&] {
    if (!name.empty()) entries[name] = Plain(text);
    name.clear();
    text.clear();
  };
  for (++i; i < lines.size() && lines[i].rfind(".SH", 0) != 0; ++i) {
    const std::string& line = lines[i];
    if (line == ".TP" || line.rfind(".SS", 0) == 0) {
      flush();
      if (line == ".TP" && i + 1 < lines.size()) {
        std::istringstream head(lines[i + 1]);
        std::string macro, word;
        head >> macro >> word;
        if (word.rfind("\\-", 0) != 0) name = word.substr(0, word.find('='));
      }
      continue;
    }
    if (!name.empty()) {
      std::string words = line;
      if (!words.empty() && words[0] == '.') {
        const size_t space = words.find(' ');
        words = space == std::string::npos ? "" : words.substr(space + 1);
      }
      text += words + " ";
    }
  }
  flush();
  return entries;
}

struct Key {
  std::string name;
  std::string fallback;
};

std::vector<Key> MountOptions() {
  std::vector<Key> keys;
  for (const MountOptionInfo& o : MountOptionTable()) {
    keys.push_back({std::string(o.name), std::string(o.fallback)});
  }
  return keys;
}

std::vector<Key> SpecKeys() {
  std::vector<Key> keys;
  for (const SpecKeyInfo& k : kSpecKeys) {
    keys.push_back({std::string(k.name), std::string(k.fallback)});
  }
  return keys;
}

// `doc` lists exactly `keys`, each with its default.
void ExpectSameKeys(const std::string& doc, const std::map<std::string, std::string>& listed,
                    const std::vector<Key>& keys) {
  std::set<std::string> names;
  for (const Key& key : keys) {
    names.insert(key.name);
    auto it = listed.find(key.name);
    if (it == listed.end()) {
      ADD_FAILURE() << doc << " does not list " << key.name;
    } else {
      EXPECT_TRUE(HasPhrase(it->second, key.fallback))
          << doc << ": " << key.name << "'s default is not '" << key.fallback << "' in '"
          << it->second << "'";
    }
  }
  for (const auto& [name, text] : listed) {
    EXPECT_TRUE(names.count(name)) << doc << " lists " << name << ", which the code lacks";
  }
}

TEST(DocTables, MountOptions) {
  ExpectSameKeys("docs/reference.md", MarkdownTable(ReadDoc("docs/reference.md"), "option"),
                 MountOptions());
  ExpectSameKeys("docs/design.md", MarkdownTable(ReadDoc("docs/design.md"), "option"),
                 MountOptions());
  ExpectSameKeys("man/joaderfs.8 OPTIONS", ManSection(ReadDoc("man/joaderfs.8"), "OPTIONS"),
                 MountOptions());
}

TEST(DocTables, SpecKeys) {
  ExpectSameKeys("docs/reference.md", MarkdownTable(ReadDoc("docs/reference.md"), "key"),
                 SpecKeys());
  ExpectSameKeys("docs/design.md", MarkdownTable(ReadDoc("docs/design.md"), "key"), SpecKeys());
  ExpectSameKeys("man/joaderfs.8 JOB SPEC", ManSection(ReadDoc("man/joaderfs.8"), "JOB SPEC"),
                 SpecKeys());
}

// --help is made from the table: every option with its default.
TEST(DocTables, HelpListsEveryOption) {
  const std::string help = Plain(UsageText("joaderfs"));
  for (const MountOptionInfo& o : MountOptionTable()) {
    const std::string lead = "-o " + std::string(o.name) + "=" + std::string(o.value);
    const size_t at = help.find(lead);
    ASSERT_NE(at, std::string::npos) << lead;
    EXPECT_NE(help.find("(default " + std::string(o.fallback) + ")", at), std::string::npos)
        << o.name;
  }
}

}  // namespace
}  // namespace joaderfs
