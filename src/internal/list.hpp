// SPDX-License-Identifier: MIT
#pragma once
/// @file list.hpp
/// Lists in configuration values and fence-agent options: items separated by
/// commas or whitespace (`devices=/dev/a, /dev/b`, `writer_units=a b`), as
/// Linux storage and HA tools write them.

#include <string>
#include <string_view>
#include <vector>

namespace nvfence {

/// The separators of a plain list: comma and every ASCII whitespace.
inline constexpr std::string_view kListSeparators = ", \t\n\v\f\r";

/// The non-empty items of @p text split at any character of @p separators,
/// in order, duplicates kept. Empty items (two separators in a row, leading
/// or trailing separators) are dropped, so "a,,b " gives {"a", "b"}.
std::vector<std::string> split_list(std::string_view text, std::string_view separators = kListSeparators);

}  // namespace nvfence
