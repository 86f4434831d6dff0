// SPDX-License-Identifier: MIT
#pragma once
/// @file json.hpp
/// A minimal JSON writer for the CLI's --json output. Keys of 64 bits are
/// always written as hex strings by the callers, never as numbers.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nvfence::cli {

/// Version of the --json output's shape, written first in every document as
/// "schema_version". Raised when a member is removed, renamed or changes
/// meaning; adding members does not raise it.
inline constexpr uint64_t kJsonSchemaVersion = 1;

/// Builds one JSON document in order; commas and nesting are tracked. The
/// outermost object starts with "schema_version" (kJsonSchemaVersion).
class Json {
public:
    /// Opens an object (as a value or, after key(), as a member).
    Json& begin_object();
    /// Closes the innermost object.
    Json& end_object();
    /// Opens an array.
    Json& begin_array();
    /// Closes the innermost array.
    Json& end_array();
    /// Writes a member name; the next call writes its value.
    Json& key(std::string_view k);
    /// Writes a string value.
    Json& str(std::string_view v);
    /// Writes an unsigned number (only for values below 2^53).
    Json& num(uint64_t v);
    /// Writes a signed number.
    Json& snum(int64_t v);
    /// Writes true or false.
    Json& boolean(bool v);
    /// Writes null.
    Json& null();
    /// The document so far.
    const std::string& text() const { return out_; }

private:
    void value_prefix();
    std::string out_;
    std::vector<bool> first_;   // per open container: no element written yet
    bool after_key_ = false;
};

/// Escapes @p s as a JSON string literal body.
std::string json_escape(std::string_view s);

}  // namespace nvfence::cli
