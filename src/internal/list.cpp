// SPDX-License-Identifier: MIT
#include "internal/list.hpp"

#include "internal/invariant.hpp"

namespace nvfence {

std::vector<std::string> split_list(std::string_view text, std::string_view separators) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t start = text.find_first_not_of(separators, pos);
        if (start == std::string_view::npos) break;
        size_t end = text.find_first_of(separators, start);
        if (end == std::string_view::npos) end = text.size();
        // A token is never empty and the cursor only moves forward, within
        // the text: the loop ends.
        NVF_INVARIANT(start >= pos && start < end && end <= text.size());
        out.emplace_back(text.substr(start, end - start));
        pos = end;
    }
    return out;
}

}  // namespace nvfence
