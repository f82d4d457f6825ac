// zen/schemes/registry.h — the list of schemes that drives the CLI, the
// tests and the docs.
//
// Each entry: id (what users type), a one-line description, and a factory.
// Whether a scheme can serve a given input is asked of the scheme itself
// (Scheme::supports), so the selector can fall back.
//
// Usage:
//   zen::SchemeRegistry reg = zen::BuiltinSchemes();
//   for (const zen::SchemeInfo& s : reg.schemes()) std::cout << s.id << "\n";
//   auto zen_scheme = reg.Create("zen", options);   // InvalidArgument if unknown
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zen/schemes/scheme.h"

namespace zen {

struct SchemeInfo {
  std::string id;
  std::string description;
  std::function<std::unique_ptr<Scheme>(const SchemeOptions&)> factory;
};

class SchemeRegistry {
 public:
  void Add(SchemeInfo info);  // InvalidArgument on a duplicate id
  const std::vector<SchemeInfo>& schemes() const& { return schemes_; }
  // On a temporary registry (`for (auto& s : AllSchemes().schemes())`) the
  // list is moved out, so the loop never reads a destroyed registry.
  std::vector<SchemeInfo> schemes() && { return std::move(schemes_); }
  const SchemeInfo* Find(std::string_view id) const;
  std::unique_ptr<Scheme> Create(std::string_view id, const SchemeOptions& options = {}) const;
  std::vector<std::string> ids() const;

 private:
  std::vector<SchemeInfo> schemes_;
};

// The schemes of this layer (dense, agsparse, zen, sparcml, omnireduce,
// sparse_ps). `auto` lives in the analysis layer (it needs the cost model):
// see zen/analysis/auto_scheme.h, AllSchemes().
SchemeRegistry BuiltinSchemes();

}  // namespace zen
