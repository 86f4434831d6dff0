// SPDX-License-Identifier: MIT
#pragma once
/// @file json.hpp
/// The CLI's --json output: documents built in order (members in the order
/// written) on nlohmann-json, the project's one JSON codec. Keys of 64 bits
/// are always written as hex strings by the callers, never as numbers.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nvfence::cli {

/// Version of the --json output's shape, written first in every document as
/// "schema_version". Raised when a member is removed, renamed or changes
/// meaning; adding members does not raise it.
inline constexpr uint64_t kJsonSchemaVersion = 1;

/// Builds one JSON document in order. The outermost object starts with
/// "schema_version" (kJsonSchemaVersion). Misuse (a member name outside an
/// object, a value without one inside it, closing what is not open) is a
/// broken invariant: abort.
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
    /// Writes a string value (bytes that are not UTF-8 become U+FFFD).
    Json& str(std::string_view v);
    /// Writes an unsigned number (only for values below 2^53).
    Json& num(uint64_t v);
    /// Writes a signed number.
    Json& snum(int64_t v);
    /// Writes true or false.
    Json& boolean(bool v);
    /// Writes null.
    Json& null();
    /// The document, compact (no spaces), on one line.
    std::string text() const;

private:
    nlohmann::ordered_json& put(nlohmann::ordered_json v);
    Json& close(bool object);

    nlohmann::ordered_json root_;
    bool has_root_ = false;
    // The open containers, outermost first. Only the innermost one grows,
    // so the pointers to its ancestors stay valid.
    std::vector<nlohmann::ordered_json*> open_;
    std::optional<std::string> key_;
};

}  // namespace nvfence::cli
