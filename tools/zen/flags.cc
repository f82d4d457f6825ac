#include "tools/zen/flags.h"

#include "zen/core/error.h"

namespace zen::cli {

Flags::Flags(Args args, std::set<std::string> values, std::set<std::string> switches,
             size_t max_positional) {
  switches.insert("help");
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == "-h" || a == "--help") {
      // Help wins: nothing else is parsed, so a malformed rest cannot keep
      // the user from reading how to write it.
      help_ = true;
      switches_.insert("help");
      return;
    }
  }
  bool only_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_positional || a.size() < 2 || a[0] != '-') {
      if (positional_.size() >= max_positional) {
        throw UsageError("unexpected argument '" + a + "' (see --help)");
      }
      positional_.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positional = true;
      continue;
    }
    if (a[1] != '-') throw UsageError("unknown option " + a + " (see --help)");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (switches.count(name)) {
      if (inline_value) throw UsageError("--" + name + " takes no value");
      switches_.insert(name);
    } else if (values.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) throw UsageError("--" + name + " needs a value");
        value = args[++i];
      }
      values_[name] = value;
    } else {
      throw UsageError("unknown option --" + name + " (see --help)");
    }
  }
}

bool Flags::Has(const std::string& name) const {
  return switches_.count(name) > 0 || values_.count(name) > 0;
}

std::optional<std::string> Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Flags::Str(const std::string& name, const std::string& fallback) const {
  return Get(name).value_or(fallback);
}

int64_t Flags::Int(const std::string& name, int64_t fallback) const {
  auto v = Get(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    const int64_t out = std::stoll(*v, &used);
    if (used == v->size()) return out;
  } catch (const std::exception&) {
  }
  throw UsageError("--" + name + "=" + *v + " is not an integer");
}

double Flags::Double(const std::string& name, double fallback) const {
  auto v = Get(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    const double out = std::stod(*v, &used);
    if (used == v->size()) return out;
  } catch (const std::exception&) {
  }
  throw UsageError("--" + name + "=" + *v + " is not a number");
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace zen::cli
